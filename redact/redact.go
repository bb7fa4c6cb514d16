// Package redact masks the passwords of connection strings (database and
// broker URLs, libpq key=value strings) in what is logged and in the errors
// that quote them, and known secret values in any text (Values).
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask is what a password is replaced with.
const Mask = "xxxxx"

// ConnString returns s with every password it holds masked:
//
//	scheme://user:PASSWORD@host/...            the URL's userinfo
//	scheme://host/db?password=PASSWORD&...     a query parameter named like a secret
//	host=db user=u password=PASSWORD           a key=value string (libpq's), the
//	host=db password='PASS WORD'               value quoted or not
//
// A name is a secret's when it contains "pass" (password, sslpassword,
// passcode, ...), "secret" or "token". The rest of s is kept as it is; a
// string of neither form that holds an '@' (user:password@host?) is masked
// whole.
func ConnString(s string) string {
	masked, _ := parse(s)
	return masked
}

// Error returns err with the passwords of s masked wherever its text quotes
// them, in any of the forms s writes them (drivers quote a connection string
// they cannot use, not always masked); errors.Is and errors.As still see
// err. A nil err stays nil.
func Error(err error, s string) error {
	if err == nil {
		return nil
	}
	_, secrets := parse(s)
	msg := err.Error()
	// The longest first, so that no part of one is left behind by a shorter.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range secrets {
		if sec != "" {
			msg = strings.ReplaceAll(msg, sec, Mask)
		}
	}
	if msg == err.Error() {
		return err
	}
	return &masked{err: err, msg: msg}
}

// Values returns s with every occurrence of each of secrets masked: text an
// outsider wrote (a push endpoint's answer, a transport error) that may quote
// a credential the service sent. The longest are masked first, so that no
// part of one is left behind by a shorter; empty secrets are skipped.
func Values(s string, secrets []string) string {
	if len(secrets) == 0 || s == "" {
		return s
	}
	sorted := slices.Clone(secrets)
	slices.SortFunc(sorted, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range sorted {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Mask)
		}
	}
	return s
}

type masked struct {
	err error
	msg string
}

func (m *masked) Error() string { return m.msg }
func (m *masked) Unwrap() error { return m.err }

// parse masks s and returns the secrets it found, each as written and as
// it reads unescaped.
func parse(s string) (string, []string) {
	if scheme, rest, ok := strings.Cut(s, "://"); ok && !strings.ContainsAny(scheme, " =") {
		return urlForm(scheme, rest)
	}
	if strings.Contains(s, "=") {
		return keyValue(s)
	}
	if strings.Contains(s, "@") {
		// Neither form, but perhaps user:password@host: all of it goes.
		return Mask, []string{s}
	}
	return s, nil
}

func urlForm(scheme, rest string) (string, []string) {
	var out strings.Builder
	var secrets []string
	out.WriteString(scheme + "://")
	// The userinfo ends at the last '@' before the query, as url.Parse reads
	// it. A password with an unescaped '?' or '#' puts its '@' after them:
	// then everything up to the last '@' may be it.
	preQuery, _, _ := strings.Cut(rest, "?")
	at := strings.LastIndex(preQuery, "@")
	if at < 0 {
		if a := strings.LastIndex(rest, "@"); a >= 0 && strings.Contains(rest[:a], ":") {
			at = a
		}
	}
	if at >= 0 {
		userinfo := rest[:at]
		if user, pw, ok := strings.Cut(userinfo, ":"); ok {
			secrets = append(secrets, forms(pw)...)
			userinfo = user + ":" + Mask
		}
		out.WriteString(userinfo + "@")
		rest = rest[at+1:]
	}
	base, query, ok := strings.Cut(rest, "?")
	out.WriteString(base)
	if !ok {
		return out.String(), secrets
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		if k, v, ok := strings.Cut(p, "="); ok && secretName(unescape(k)) {
			params[i] = k + "=" + Mask
			secrets = append(secrets, forms(v)...)
		}
	}
	out.WriteString("?" + strings.Join(params, "&"))
	if hasFragment {
		out.WriteString("#" + fragment)
	}
	return out.String(), secrets
}

// keyValue masks the secrets of a libpq key=value string: keyword = value
// pairs apart by whitespace, a value either quoted ('a b', with \' and \\)
// or running to the next whitespace (with backslash escapes too).
func keyValue(s string) (string, []string) {
	var out strings.Builder
	var secrets []string
	i := 0
	for i < len(s) {
		j := skipSpace(s, i)
		out.WriteString(s[i:j])
		if i = j; i >= len(s) {
			break
		}
		for j < len(s) && s[j] != '=' && !isSpace(s[j]) {
			j++
		}
		key := s[i:j]
		out.WriteString(key)
		i = j
		if j = skipSpace(s, j); j >= len(s) || s[j] != '=' {
			out.WriteString(s[i:j])
			i = j
			continue // a word without a value: copied as it is
		}
		j = skipSpace(s, j+1)
		out.WriteString(s[i:j])
		i = j
		var value strings.Builder
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		for i < len(s) && (quoted && s[i] != '\'' || !quoted && !isSpace(s[i])) {
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			value.WriteByte(s[i])
			i++
		}
		if quoted && i < len(s) {
			i++ // the closing quote
		}
		if secretName(key) {
			out.WriteString(Mask)
			secrets = append(secrets, s[j:i], value.String())
		} else {
			out.WriteString(s[j:i])
		}
	}
	return out.String(), secrets
}

func secretName(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "pass") || strings.Contains(n, "secret") || strings.Contains(n, "token")
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// forms is s as written in a URL and as it reads unescaped (where '+' is a
// plus in a path, a space in a query).
func forms(s string) []string {
	out := []string{s, unescape(s)}
	if u, err := url.PathUnescape(s); err == nil {
		out = append(out, u)
	}
	return out
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
