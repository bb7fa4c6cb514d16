package app_test

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	cfg, err := app.LoadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != ":8080" || cfg.DatabaseURL != "sqlite:data/messaging-api.db" || cfg.BrokerURL != "embedded" ||
		!cfg.MigrateOnStart || cfg.HTTP.ShutdownTimeout != 15*time.Second || cfg.HTTP.BodyLimit != 1<<20 {
		t.Errorf("defaults: %+v", cfg)
	}

	cfg, err = app.LoadConfig([]string{"-addr", ":9000"}, env(map[string]string{"HTTP_ADDR": ":7000", "LOG_LEVEL": "debug"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != ":9000" || cfg.LogLevel.String() != "DEBUG" {
		t.Errorf("flag should win over env: %+v", cfg)
	}

	bad := []struct{ env, value string }{
		{"DATABASE_URL", "mysql://x"},
		{"LOG_LEVEL", "loud"},
		{"LOG_FORMAT", "xml"},
		{"MIGRATE_ON_START", "perhaps"},
		{"HTTP_BODY_LIMIT", "12"},
		{"SHUTDOWN_TIMEOUT", "soon"},
		{"HTTP_READ_TIMEOUT", "-1s"},
		{"PUSH_AUTH_KEY", "c2hvcnQ="},
		{"PUSH_AUTH_OLD_KEYS", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8FIQ8=,nope"},
		{"PUSH_TEST_INTERVAL", "0s"},
	}
	for _, b := range bad {
		t.Run(b.env, func(t *testing.T) {
			_, err := app.LoadConfig(nil, env(map[string]string{b.env: b.value}), io.Discard)
			if err == nil || !strings.Contains(err.Error(), b.env) {
				t.Errorf("error %v does not name %s", err, b.env)
			}
		})
	}
}

func TestConfigLogHidesSecrets(t *testing.T) {
	t.Parallel()
	cfg, err := app.LoadConfig(nil, func(k string) string {
		return map[string]string{
			"DATABASE_URL":             "postgres://app:s3cret@db:5432/app",
			"BROKER_URL":               "stomp://artemis:hunter2@mq:61613?dialect=artemis",
			"AUTH_BOOTSTRAP_ADMIN_KEY": "mapi_bootstrap-0123456789-0123456789-xyz",
			"PUSH_AUTH_KEY":            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8FIQ8=",
			"PUSH_AUTH_OLD_KEYS":       "q3Jx5mYb0Jw8m3m2oQ6m1d7h0b8W2Zy9QxV4u5t6s7A=",
		}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.LogValue().String()
	if strings.Contains(s, "s3cret") || strings.Contains(s, "hunter2") || strings.Contains(s, "bootstrap-0123") ||
		strings.Contains(s, "MfKQ9r8G") || strings.Contains(s, "q3Jx5mYb") {
		t.Errorf("secrets in log value: %s", s)
	}
	if !strings.Contains(s, "push_auth_key_id="+cfg.PushAuth.Key.ID()) || cfg.PushAuth.Key.ID() == "" {
		t.Errorf("the log value does not name the push auth key by id: %s", s)
	}
}

// TestPasswordsNeverShown: a password in any form of DATABASE_URL or
// BROKER_URL, and the bootstrap key, appear neither in the log nor in the
// error that stops the process: the start-up line, the driver's own errors
// and the refusal of a value alike.
func TestPasswordsNeverShown(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	cases := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"database URL userinfo", []string{"migrate"}, map[string]string{"DATABASE_URL": "postgres://app:hunter2@127.0.0.1:1/db?connect_timeout=1"}},
		{"database URL query", []string{"migrate"}, map[string]string{"DATABASE_URL": "postgres://app@127.0.0.1:1/db?password=hunter2&connect_timeout=1"}},
		{"database URL query the driver refuses", []string{"migrate"}, map[string]string{"DATABASE_URL": "postgres://app@127.0.0.1:1/db?password=hunter2&sslmode=bogus"}},
		{"database URL flag", []string{"migrate", "-database-url", "postgresql://app@127.0.0.1:1/db?sslpassword=hunter2&connect_timeout=1"}, nil},
		{"database key=value", []string{"migrate"}, map[string]string{"DATABASE_URL": "host=127.0.0.1 password=hunter2 dbname=db"}},
		{"database key=value quoted", []string{"migrate"}, map[string]string{"DATABASE_URL": "host=127.0.0.1 password='hunter2 x' dbname=db"}},
		{"broker URL userinfo", nil, map[string]string{"DATABASE_URL": sqlite, "BROKER_URL": "stomp://app:hunter2@127.0.0.1:1?bogus=1"}},
		{"broker URL query", nil, map[string]string{"DATABASE_URL": sqlite, "BROKER_URL": "stomp://127.0.0.1:1?passcode=hunter2"}},
		{"broker URL unparsable", nil, map[string]string{"DATABASE_URL": sqlite, "BROKER_URL": "stomp://app:hunter2@127.0.0.1:1 /%zz"}},
		{"bootstrap key refused", nil, map[string]string{"DATABASE_URL": sqlite, "AUTH_BOOTSTRAP_ADMIN_KEY": "hunter2 is short"}},
		{"push auth key refused", nil, map[string]string{"DATABASE_URL": sqlite, "PUSH_AUTH_KEY": "hunter2 is no key"}},
		{"push auth old key refused", nil, map[string]string{"DATABASE_URL": sqlite, "PUSH_AUTH_OLD_KEYS": "hunter2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			command, args := "serve", tc.args
			if len(args) > 0 {
				command, args = args[0], args[1:]
			}
			err := app.Main(t.Context(), command, args, func(k string) string { return tc.env[k] }, &logs)
			if err == nil {
				t.Fatal("the process started")
			}
			for what, text := range map[string]string{"error": err.Error(), "log": logs.String()} {
				if strings.Contains(text, "hunter2") {
					t.Errorf("the %s shows the password: %s", what, text)
				}
			}
			if !strings.Contains(err.Error()+logs.String(), "xxxxx") {
				t.Errorf("nothing says a password was masked: %v\n%s", err, logs.String())
			}
		})
	}
}

// TestSplitRolesNeedASharedBroker: an api or a dispatcher on the embedded
// broker would never meet the other, so it refuses to start; serve runs both
// in one process and may use it.
func TestSplitRolesNeedASharedBroker(t *testing.T) {
	t.Parallel()
	for _, command := range []string{"api", "dispatcher"} {
		env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "db"), "BROKER_URL": "embedded"}
		err := app.Main(t.Context(), command, nil, func(k string) string { return env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "embedded broker lives inside one process") {
			t.Errorf("%s on the embedded broker: %v, want a refusal", command, err)
		}
	}
}
