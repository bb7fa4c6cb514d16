package push

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sign returns the Standard Webhooks webhook-signature header value for body:
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" for each secret, space
// separated. Secrets are "whsec_" and the base64 of the key.
func Sign(secrets []string, id string, ts time.Time, body []byte) string {
	timestamp := strconv.FormatInt(ts.Unix(), 10)
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		key, err := secretKey(secret)
		if err != nil {
			continue
		}
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(signature(key, id, timestamp, body)))
	}
	return strings.Join(sigs, " ")
}

// secretKey is the HMAC key of a "whsec_<base64>" secret (the prefix is
// optional, as Standard Webhooks libraries take it).
func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return nil, errors.New("not a signing secret (whsec_ and the base64 of a key)")
	}
	return key, nil
}

// signature is HMAC-SHA256(key, id "." timestamp "." body).
func signature(key []byte, id, timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return mac.Sum(nil)
}

// What Verify finds wrong with a request.
var (
	// ErrNoSignature: the webhook-signature header holds no v1 signature.
	ErrNoSignature = errors.New("no v1 signature in webhook-signature")
	// ErrMismatch: no signature of the header matches any of the secrets:
	// the body, id or timestamp changed, or the secret is not the
	// subscription's.
	ErrMismatch = errors.New("no signature matches the secrets")
	// ErrTimestamp: webhook-timestamp is not a Unix time within the
	// tolerance of now (a replayed or delayed request).
	ErrTimestamp = errors.New("webhook-timestamp outside the tolerance")
)

// Verify checks a received push request as Standard Webhooks tells a
// receiver to: id, timestamp and signature are its webhook-id,
// webhook-timestamp and webhook-signature headers, body its body byte for
// byte. It returns the index in secrets of the secret that one of the
// header's "v1,<base64>" entries verifies with (during a rotation the
// request carries one per secret), or an error: ErrNoSignature,
// ErrMismatch, or, for a request signed right, ErrTimestamp when the
// timestamp is more than tolerance away from now (0: the time is not
// checked; Standard Webhooks suggests 5 minutes). A secret that is not
// "whsec_<base64>" is an error of its own.
func Verify(secrets []string, id, timestamp string, body []byte, signatureHeader string, now time.Time, tolerance time.Duration) (int, error) {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := secretKey(s)
		if err != nil {
			return -1, fmt.Errorf("secret %d: %w", i+1, err)
		}
		keys[i] = k
	}
	if len(keys) == 0 {
		return -1, errors.New("no secret to verify with")
	}
	var sigs [][]byte
	for _, entry := range strings.Fields(signatureHeader) {
		if b64, ok := strings.CutPrefix(entry, "v1,"); ok {
			if sig, err := base64.StdEncoding.DecodeString(b64); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	if len(sigs) == 0 {
		return -1, ErrNoSignature
	}
	matched := -1
	for i := 0; i < len(keys) && matched < 0; i++ {
		want := signature(keys[i], id, timestamp, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				matched = i
				break
			}
		}
	}
	if matched < 0 {
		return -1, ErrMismatch
	}
	if tolerance > 0 {
		sec, err := strconv.ParseInt(timestamp, 10, 64)
		if err != nil {
			return -1, fmt.Errorf("%w: %q is not a Unix time in seconds", ErrTimestamp, timestamp)
		}
		if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
			return -1, fmt.Errorf("%w: it is %v away from now, more than %v", ErrTimestamp, d.Abs().Round(time.Second), tolerance)
		}
	}
	return matched, nil
}
