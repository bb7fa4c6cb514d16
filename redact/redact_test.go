package redact

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
)

func TestConnString(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"URL userinfo", "postgres://app:s3cret@db:5432/msg?sslmode=disable", "postgres://app:xxxxx@db:5432/msg?sslmode=disable"},
		{"URL userinfo escaped", "postgresql://app:p%40ss%2Fw@db/msg", "postgresql://app:xxxxx@db/msg"},
		{"URL userinfo with a raw @", "postgres://app:p@ss@db/msg", "postgres://app:xxxxx@db/msg"},
		{"URL userinfo with a raw ?", "postgres://app:pa?ss@db/msg", "postgres://app:xxxxx@db/msg"},
		{"URL user only", "postgres://app@db/msg", "postgres://app@db/msg"},
		{"URL password query", "postgres://app@db/msg?password=s3cret&sslmode=require", "postgres://app@db/msg?password=xxxxx&sslmode=require"},
		{"URL password query last", "postgres://db/msg?sslmode=disable&password=s3cret", "postgres://db/msg?sslmode=disable&password=xxxxx"},
		{"URL sslpassword query", "postgres://db/msg?sslpassword=k3y&PassWord=x", "postgres://db/msg?sslpassword=xxxxx&PassWord=xxxxx"},
		{"URL both", "postgres://app:one@db/msg?password=two", "postgres://app:xxxxx@db/msg?password=xxxxx"},
		{"URL escaped query name", "postgres://db/msg?pass%77ord=s3cret", "postgres://db/msg?pass%77ord=xxxxx"},
		{"URL fragment kept", "postgres://db/msg?password=a#frag", "postgres://db/msg?password=xxxxx#frag"},
		{"URL @ in a query value", "postgres://db/msg?application_name=a@b&password=x", "postgres://db/msg?application_name=a@b&password=xxxxx"},
		{"URL nothing secret", "postgres://db:5432/msg?sslmode=disable", "postgres://db:5432/msg?sslmode=disable"},
		{"broker URL", "stomp+ssl://admin:s3cret@mq:61614?dialect=artemis&passcode=p", "stomp+ssl://admin:xxxxx@mq:61614?dialect=artemis&passcode=xxxxx"},
		{"key=value", "host=db user=app password=s3cret dbname=msg", "host=db user=app password=xxxxx dbname=msg"},
		{"key=value quoted", "host=db password='s3 cr\\'et' dbname=msg", "host=db password=xxxxx dbname=msg"},
		{"key=value spaced", "host = db password = s3cret", "host = db password = xxxxx"},
		{"key=value escaped", `host=db password=a\ b dbname=msg`, "host=db password=xxxxx dbname=msg"},
		{"key=value unterminated quote", "host=db password='s3cret dbname=msg", "host=db password=xxxxx"},
		{"key=value empty", "host=db password='' dbname=msg", "host=db password=xxxxx dbname=msg"},
		// libpq reads the next word as the value, spaces around '=' or not.
		{"key=value space after =", "host=db password= s3cret", "host=db password= xxxxx"},
		{"key=value with a URL inside", "host=db password=x application_name=http://a:b@c", "host=db password=xxxxx application_name=http://a:b@c"},
		{"neither form", "db user:s3cret@host", "xxxxx"},
		{"sqlite", "sqlite:data/messaging-api.db", "sqlite:data/messaging-api.db"},
		{"embedded", "embedded", "embedded"},
		{"empty", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ConnString(tc.in); got != tc.want {
				t.Errorf("ConnString(%q)\n = %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestError: a driver error quoting the string in any form loses its
// passwords, and still matches what it wraps.
func TestError(t *testing.T) {
	t.Parallel()
	cases := []struct{ conn, quoted string }{
		{"postgres://app@db/msg?password=s3cr%2Bet&sslmode=bogus", "cannot parse `postgres://app@db/msg?password=s3cr%2Bet&sslmode=bogus`"},
		{"postgres://app@db/msg?password=s3cr%2Bet", "password s3cr+et"},
		{"postgres://app:p%40ss@db/msg", "user app:p@ss"},
		{"host=db password='a b' sslmode=bogus", "cannot parse `host=db password='a b' sslmode=bogus`"},
		{"host=db password='a b'", "password a b refused"},
	}
	for _, tc := range cases {
		err := Error(fmt.Errorf("open: %s: %w", tc.quoted, io.ErrUnexpectedEOF), tc.conn)
		for _, secret := range []string{"s3cr", "p@ss", "p%40ss", "a b"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: error %q still holds %q", tc.conn, err, secret)
			}
		}
		if !strings.Contains(err.Error(), Mask) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: error %q", tc.conn, err)
		}
	}
	plain := errors.New("connection refused")
	if Error(plain, "postgres://app:x@db/msg") != plain { //nolint:errorlint // the very value is kept, not a wrapper
		t.Error("an error without the password is not kept as it is")
	}
	if Error(nil, "postgres://app:x@db/msg") != nil {
		t.Error("Error(nil) is not nil")
	}
}

// FuzzConnString: a password never survives masking, in a URL's userinfo,
// its query or a key=value string, escaped as each form escapes it.
func FuzzConnString(f *testing.F) {
	for _, s := range []string{"s3cret", "p@ss/w?rd#x", "a b'c\\d", "+%20&=", "ü€"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, pw string) {
		if len(pw) < 4 || strings.ContainsAny(pw, "\x00") {
			return // short ones occur in the rest of the string by chance
		}
		kvQuoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		for _, conn := range []string{
			"postgres://app:" + url.PathEscape(pw) + "@db:5432/msg?sslmode=disable",
			"postgres://app@db/msg?password=" + url.QueryEscape(pw) + "&sslmode=disable",
			"stomp://admin:" + url.PathEscape(pw) + "@mq:61613?passcode=" + url.QueryEscape(pw),
			"host=db user=app password=" + kvQuoted + " dbname=msg",
		} {
			masked := ConnString(conn)
			rest := strings.ReplaceAll(masked, Mask, "")
			for _, form := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw), kvQuoted} {
				if strings.Contains(rest, form) && !strings.Contains("postgres://app@db:5432/msg?sslmode=disable&dialect=artemis host= user= dbname= mq:61613", form) {
					t.Fatalf("ConnString(%q) = %q keeps %q", conn, masked, form)
				}
			}
			if err := Error(errors.New("cannot parse `"+conn+"`"), conn); strings.Contains(strings.ReplaceAll(err.Error(), Mask, ""), pw) {
				t.Fatalf("Error keeps the password: %q", err)
			}
		}
	})
}

func TestValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		secrets []string
		want    string
	}{
		{"Authorization: Bearer tok-123 seen", []string{"tok-123"}, "Authorization: Bearer xxxxx seen"},
		{"a=pass-long b=pass", []string{"pass", "pass-long"}, "a=xxxxx b=xxxxx"},
		{"twice: k1 k1", []string{"k1", ""}, "twice: xxxxx xxxxx"},
		{"nothing here", nil, "nothing here"},
		{"", []string{"x"}, ""},
	} {
		if got := Values(tc.in, tc.secrets); got != tc.want {
			t.Errorf("Values(%q, %q) = %q, want %q", tc.in, tc.secrets, got, tc.want)
		}
	}
}
