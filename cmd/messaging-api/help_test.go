package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelp: help, -h and help COMMAND show the commands and the flags with
// the kinds of their values, on stdout with exit code 0; unknown commands
// and flags exit 2.
func TestHelp(t *testing.T) {
	t.Parallel()
	cmd := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := cli(t.Context(), args, func(string) string { return "" }, &out, &errOut)
		return out.String(), errOut.String(), code
	}
	whole := []string{"\n  serve ", "\n  api ", "\n  dispatcher ", "\n  migrate ", "\n  check-broker ", "\n  push-rule ", "\n  apikey ", "\n  help ",
		"  -addr host:port\n", "  -push-timeout duration\n", "  -push-workers int\n", "  -auth-disabled[=true|false]\n", "(env PUSH_AUTH_KEY; no default)"}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-log-level", "debug", "-help"}} {
		out, errOut, code := cmd(args...)
		if code != 0 || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
		for _, want := range whole {
			if !strings.Contains(out, want) {
				t.Errorf("%v lacks %q:\n%s", args, want, out)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help", "serve"}, []string{"usage: messaging-api serve [flags]", "  -database-url URL\n"}},
		{[]string{"dispatcher", "-h"}, []string{"usage: messaging-api dispatcher [flags]", "  -push-prefetch int\n"}},
		{[]string{"help", "check-broker"}, []string{"usage: messaging-api check-broker [flags]", "  -broker-url URL\n"}},
		{[]string{"push-rule", "--help"}, []string{"usage: messaging-api push-rule [flags]", "  -push-allowed-cidrs CIDR,...\n"}},
		{[]string{"help", "apikey"}, []string{"messaging-api apikey revoke ID", "  -expires duration\n", "  -room ROOM\n"}},
		{[]string{"apikey", "-h"}, []string{"messaging-api apikey list", "  -role string\n"}},
		{[]string{"help", "help"}, []string{"usage: messaging-api help [COMMAND]"}},
	} {
		out, errOut, code := cmd(tc.args...)
		if code != 0 || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("%v lacks %q:\n%s", tc.args, want, out)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `no command "frobnicate"`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"migrate", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "-push-timeout"}, "flag needs an argument: -push-timeout"},
		{[]string{"apikey"}, "apikey needs a subcommand"},
		{[]string{"apikey", "frob"}, `apikey has no subcommand "frob"`},
		{[]string{"apikey", "revoke"}, "apikey revoke takes one key id"},
		{[]string{"apikey", "create", "-expires", "soon"}, `invalid value "soon" for flag -expires`},
	} {
		out, errOut, code := cmd(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "help") && !strings.Contains(errOut, "usage:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q with the usage or a pointer to the help", tc.args, code, out, errOut, tc.want)
		}
	}
	// A bad value is not a usage error: the setting is named, exit 1.
	if _, errOut, code := cmd("migrate", "-push-workers", "lots"); code != exitFailed || !strings.Contains(errOut, "PUSH_WORKERS (flag -push-workers=\"lots\"): must be an integer") {
		t.Errorf("a bad value: exit %d, %q", code, errOut)
	}
}
