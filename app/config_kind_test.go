package app

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestSettingKinds: the kind the help shows for each setting is what the
// setting takes: its default reads as that kind, and a value of another
// kind is refused.
func TestSettingKinds(t *testing.T) {
	t.Parallel()
	wrong := map[kind][]string{
		kindInt:      {"1.5", "ten", "1s"},
		kindNumber:   {"ten", "1s"},
		kindBool:     {"maybe", "2", "yes"},
		kindDuration: {"10", "ten", "1 s"},
		kindLevel:    {"loud"},
		kindFormat:   {"xml"},
	}
	for _, s := range settings {
		t.Run(s.env, func(t *testing.T) {
			if s.kind == "" {
				t.Fatal("no kind")
			}
			cfg := base
			if err := s.apply(&cfg, s.def); err != nil {
				t.Errorf("default %q refused: %v", s.def, err)
			}
			for _, v := range wrong[s.kind] {
				cfg := base
				if err := s.apply(&cfg, v); err == nil {
					t.Errorf("%q accepted as a %s", v, s.kind)
				}
			}
		})
	}
}

// TestBoolFlags: a bool setting's flag stands alone or takes its value
// after "=" or as the next argument; other flags take the next argument
// whatever it looks like.
func TestBoolFlags(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	for _, tc := range []struct {
		args      []string
		https     bool
		migrate   bool
		addr      string
		wantError string
	}{
		{args: nil, migrate: true, addr: ":8080"},
		{args: []string{"-push-https-only"}, https: true, migrate: true, addr: ":8080"},
		{args: []string{"--push-https-only", "-migrate-on-start=false"}, https: true, addr: ":8080"},
		{args: []string{"-push-https-only", "true", "-migrate-on-start", "false", "-addr", ":1"}, https: true, addr: ":1"},
		{args: []string{"-push-https-only", "-addr", "true"}, https: true, migrate: true, addr: "true"},
		{args: []string{"-push-https-only", "sometimes"}, wantError: `unexpected argument "sometimes"`},
		{args: []string{"-push-https-only=sometimes"}, wantError: "PUSH_HTTPS_ONLY (flag -push-https-only=\"sometimes\"): must be true or false"},
		{args: []string{"-addr"}, wantError: "flag needs an argument: -addr"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			cfg, err := LoadConfig(tc.args, none, &stderr)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Errorf("error %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if cfg.PushTarget.HTTPSOnly != tc.https || cfg.MigrateOnStart != tc.migrate || cfg.HTTP.Addr != tc.addr {
				t.Errorf("https-only %v, migrate %v, addr %q; want %v, %v, %q", cfg.PushTarget.HTTPSOnly, cfg.MigrateOnStart, cfg.HTTP.Addr, tc.https, tc.migrate, tc.addr)
			}
		})
	}
}

// TestSettingsHelp: the help lists every flag with the kind of value it takes,
// its variable and default.
func TestSettingsHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	WriteSettings(&out)
	help := out.String()
	for _, s := range settings {
		head := "  -" + s.flag + " " + string(s.kind) + "\n"
		if s.kind == kindBool {
			head = "  -" + s.flag + "[=true|false]\n"
		}
		if !strings.Contains(help, head) || !strings.Contains(help, "(env "+s.env+"; ") {
			t.Errorf("the help lacks %q with env %s", head, s.env)
		}
	}
	for _, line := range []string{"  -push-timeout duration\n", "  -push-workers int\n", "  -database-url URL\n", "  -console[=true|false]\n", "  -publish-rate-limit number\n"} {
		if !strings.Contains(help, line) {
			t.Errorf("the help lacks %q", line)
		}
	}
}

// TestFormatDuration: defaults show as they would be written.
func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		30 * time.Second: "30s", 10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m",
		250 * time.Millisecond: "250ms", 168 * time.Hour: "168h", time.Hour + 30*time.Second: "1h0m30s", 0: "0s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
