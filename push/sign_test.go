package push

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// verifyStandardWebhook checks a webhook-signature header the way the
// Standard Webhooks specification tells a receiver to, written from the spec
// and not from Sign: the signed content is "${id}.${timestamp}.${body}", the
// key is the base64 decoding of the secret after "whsec_", the MAC is
// HMAC-SHA256, and the header lists "v1,<base64 MAC>" entries separated by
// spaces. It returns how many entries verify with secret.
func verifyStandardWebhook(t *testing.T, secret, id, timestamp string, body []byte, header string) int {
	t.Helper()
	encoded, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		t.Fatalf("secret %q lacks the whsec_ prefix", secret)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		t.Fatalf("secret is not base64: %v", err)
	}
	signed := []byte(id + "." + timestamp + "." + string(body))
	mac := hmac.New(sha256.New, key)
	mac.Write(signed)
	expected := mac.Sum(nil)
	n := 0
	for _, entry := range strings.Split(header, " ") {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(raw, expected) {
			n++
		}
	}
	return n
}

func newTestSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

func TestSignKnownAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		secret string
		id     string
		ts     int64
		body   string
		want   string
	}{
		{
			// The test vector published with the Standard Webhooks specification.
			name: "specification vector", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			id: "msg_p5jXN8AQM9LWM0D4loKWxJek", ts: 1614265330, body: `{"test": 2432232314}`,
			want: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		},
		{
			// Derived once by hand with OpenSSL, independently of Go:
			//   key = bytes 0x00..0x1f, so the secret is whsec_ + base64(key);
			//   printf '%s' '01890a5d-ac96-774b-bcce-b302099a8057.1700000000.{"n":1}' |
			//     openssl dgst -sha256 -mac HMAC \
			//       -macopt hexkey:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f \
			//       -binary | base64
			name: "event id as message id", secret: "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
			id: "01890a5d-ac96-774b-bcce-b302099a8057", ts: 1700000000, body: `{"n":1}`,
			want: "v1,msyLTLFqArxqBgboYUe6QoG9MLG6wmcaCaCF5E8xvW4=",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Sign([]string{tt.secret}, tt.id, time.Unix(tt.ts, 0), []byte(tt.body))
			if got != tt.want {
				t.Errorf("Sign = %q, want %q", got, tt.want)
			}
			if n := verifyStandardWebhook(t, tt.secret, tt.id, strconv.FormatInt(tt.ts, 10), []byte(tt.body), tt.want); n != 1 {
				t.Errorf("the independent verifier accepts %d signatures of the known answer, want 1", n)
			}
		})
	}
}

func TestSignVerifiesIndependently(t *testing.T) {
	t.Parallel()
	secret := newTestSecret(t)
	ts := time.Unix(1767225600, 999_000_000) // sub-second part must not matter
	tests := []struct {
		name string
		id   string
		body []byte
	}{
		{"json", "01999999-0000-7000-8000-000000000001", []byte(`{"orderId":"A-1","total":25.5}`)},
		{"empty body", "evt", nil},
		{"binary body", "evt.with.dots", []byte{0, 1, 2, 0xff, '.', '\n'}},
		{"unicode", "ünï", []byte(`{"name":"Zoë ☃"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := Sign([]string{secret}, tt.id, ts, tt.body)
			if !strings.HasPrefix(header, "v1,") || strings.Contains(header, " ") {
				t.Fatalf("header %q is not one v1 signature", header)
			}
			if n := verifyStandardWebhook(t, secret, tt.id, "1767225600", tt.body, header); n != 1 {
				t.Errorf("header %q does not verify", header)
			}
			// A change to any signed part breaks the signature.
			tampered := append([]byte(nil), tt.body...)
			tampered = append(tampered, ' ')
			if n := verifyStandardWebhook(t, secret, tt.id, "1767225600", tampered, header); n != 0 {
				t.Error("a changed body still verifies")
			}
			if n := verifyStandardWebhook(t, secret, tt.id+"x", "1767225600", tt.body, header); n != 0 {
				t.Error("a changed id still verifies")
			}
			if n := verifyStandardWebhook(t, secret, tt.id, "1767225601", tt.body, header); n != 0 {
				t.Error("a changed timestamp still verifies")
			}
			if n := verifyStandardWebhook(t, newTestSecret(t), tt.id, "1767225600", tt.body, header); n != 0 {
				t.Error("another secret verifies")
			}
		})
	}
}

func TestSignRotation(t *testing.T) {
	t.Parallel()
	current, previous := newTestSecret(t), newTestSecret(t)
	ts := time.Unix(1767225600, 0)
	body := []byte(`{"n":2}`)
	header := Sign([]string{current, previous}, "evt-2", ts, body)
	entries := strings.Split(header, " ")
	if len(entries) != 2 {
		t.Fatalf("header %q has %d entries, want 2 (one per secret)", header, len(entries))
	}
	for _, secret := range []string{current, previous} {
		if n := verifyStandardWebhook(t, secret, "evt-2", "1767225600", body, header); n != 1 {
			t.Errorf("%d signatures verify with one of the secrets, want exactly 1", n)
		}
	}
	// Newest first: a receiver that knows only the new secret finds it first.
	if verifyStandardWebhook(t, current, "evt-2", "1767225600", body, entries[0]) != 1 {
		t.Error("the first signature is not the current secret's")
	}
}

func TestSignSkipsUnusableSecrets(t *testing.T) {
	t.Parallel()
	good := newTestSecret(t)
	ts := time.Unix(1767225600, 0)
	tests := []struct {
		name    string
		secrets []string
		want    int // entries in the header
	}{
		{"none", nil, 0},
		{"not base64", []string{"whsec_***"}, 0},
		{"empty key", []string{"whsec_"}, 0},
		{"bad then good", []string{"whsec_***", good}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := Sign(tt.secrets, "evt", ts, []byte("{}"))
			got := 0
			if header != "" {
				got = len(strings.Split(header, " "))
			}
			if got != tt.want {
				t.Fatalf("header %q has %d entries, want %d", header, got, tt.want)
			}
			if tt.want == 1 && verifyStandardWebhook(t, good, "evt", "1767225600", []byte("{}"), header) != 1 {
				t.Errorf("header %q does not verify with the usable secret", header)
			}
		})
	}
}

// TestSignVerifiesWithReferenceLibrary checks Sign against the npm package
// standardwebhooks when node can load it; it installs nothing and skips
// otherwise.
func TestSignVerifiesWithReferenceLibrary(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not on PATH")
	}
	if out, err := exec.Command(node, "-e", "require('standardwebhooks')").CombinedOutput(); err != nil {
		t.Skipf("npm package standardwebhooks cannot be required: %s", firstLine(string(out)))
	}
	current, previous := newTestSecret(t), newTestSecret(t)
	now := time.Now()
	body := `{"orderId":"A-1","total":25.5}`
	header := Sign([]string{current, previous}, "evt-node", now, []byte(body))
	script := `
const { Webhook } = require('standardwebhooks');
const [secret, id, ts, sig, body] = process.argv.slice(2);
new Webhook(secret).verify(body, {'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': sig});
`
	dir := t.TempDir()
	path := filepath.Join(dir, "verify.js")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, secret := range []string{current, previous} {
		cmd := exec.Command(node, path, secret, "evt-node", strconv.FormatInt(now.Unix(), 10), header, body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("secret %d: standardwebhooks rejects the signature: %v\n%s", i, err, out)
		}
	}
}

// firstLine is the line of node's output that says what went wrong.
func firstLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.Contains(l, "Error") {
			return fmt.Sprintf("%.200s", strings.TrimSpace(l))
		}
	}
	return fmt.Sprintf("%.200s", lines[0])
}

// TestVerify checks Verify against the specification's test vector, Sign's
// headers and what a receiver must refuse.
func TestVerify(t *testing.T) {
	t.Parallel()
	const (
		specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		specTS     = "1614265330"
		specBody   = `{"test": 2432232314}`
		specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	specTime := time.Unix(1614265330, 0)
	current, previous, other := newTestSecret(t), newTestSecret(t), newTestSecret(t)
	ts := time.Unix(1767225600, 0)
	body := []byte(`{"orderId":"A-1"}`)
	rotated := Sign([]string{current, previous}, "evt-1", ts, body)
	tests := []struct {
		name      string
		secrets   []string
		id, stamp string
		body      string
		header    string
		now       time.Time
		tolerance time.Duration
		want      int
		wantErr   error
		errText   string
	}{
		{name: "specification vector", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, header: specSig, now: specTime.Add(4 * time.Minute), tolerance: 5 * time.Minute},
		{name: "time not checked", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, header: specSig, now: time.Now()},
		{name: "among other entries", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, header: "v2,abc v1,bm90IGl0 " + specSig, now: specTime},
		{name: "tampered body", secrets: []string{specSecret}, id: specID, stamp: specTS, body: `{"test": 2432232315}`, header: specSig, now: specTime, wantErr: ErrMismatch},
		{name: "other id", secrets: []string{specSecret}, id: specID + "x", stamp: specTS, body: specBody, header: specSig, now: specTime, wantErr: ErrMismatch},
		{name: "other timestamp", secrets: []string{specSecret}, id: specID, stamp: "1614265331", body: specBody, header: specSig, now: specTime, wantErr: ErrMismatch},
		{name: "other secret", secrets: []string{other}, id: specID, stamp: specTS, body: specBody, header: specSig, now: specTime, wantErr: ErrMismatch},
		{name: "too old", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, header: specSig, now: specTime.Add(6 * time.Minute), tolerance: 5 * time.Minute, wantErr: ErrTimestamp, errText: "6m0s away from now"},
		{name: "from the future", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, header: specSig, now: specTime.Add(-6 * time.Minute), tolerance: 5 * time.Minute, wantErr: ErrTimestamp},
		{name: "no signature", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, header: "v1a,xyz", now: specTime, wantErr: ErrNoSignature},
		{name: "empty header", secrets: []string{specSecret}, id: specID, stamp: specTS, body: specBody, now: specTime, wantErr: ErrNoSignature},
		{name: "bad secret", secrets: []string{other, "whsec_***"}, id: specID, stamp: specTS, body: specBody, header: specSig, now: specTime, errText: "secret 2: not a signing secret"},
		{name: "no secret", id: specID, stamp: specTS, body: specBody, header: specSig, now: specTime, errText: "no secret"},
		{name: "rotation: the new secret", secrets: []string{current}, id: "evt-1", stamp: "1767225600", body: string(body), header: rotated, now: ts},
		{name: "rotation: the old secret", secrets: []string{other, previous}, id: "evt-1", stamp: "1767225600", body: string(body), header: rotated, now: ts, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Verify(tt.secrets, tt.id, tt.stamp, []byte(tt.body), tt.header, tt.now, tt.tolerance)
			switch {
			case tt.wantErr == nil && tt.errText == "":
				if err != nil || got != tt.want {
					t.Errorf("Verify = %d, %v; want %d, nil", got, err, tt.want)
				}
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr), err == nil, !strings.Contains(err.Error(), tt.errText):
				t.Errorf("Verify = %d, %v; want %v %q", got, err, tt.wantErr, tt.errText)
			}
		})
	}
}
