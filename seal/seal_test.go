package seal_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/seal"
)

const (
	keyA = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8FIQ8="
	keyB = "q3Jx5mYb0Jw8m3m2oQ6m1d7h0b8W2Zy9QxV4u5t6s7A="
)

func mustKey(t *testing.T, s string) seal.Key {
	t.Helper()
	k, err := seal.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	t.Parallel()
	a, b := mustKey(t, keyA), mustKey(t, keyB)
	ring := seal.NewKeyring(a)
	id, sealed, err := ring.Seal([]byte("hunter2"), []byte("row-1"))
	if err != nil {
		t.Fatal(err)
	}
	if id != a.ID() || len(id) != 16 || strings.Contains(sealed, "hunter2") {
		t.Fatalf("sealed as %s %q", id, sealed)
	}
	_, again, _ := ring.Seal([]byte("hunter2"), []byte("row-1"))
	if again == sealed {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	got, err := ring.Open(id, sealed, []byte("row-1"))
	if err != nil || !bytes.Equal(got, []byte("hunter2")) {
		t.Fatalf("open: %q, %v", got, err)
	}
	if _, err := ring.Open(id, sealed, []byte("row-2")); err == nil {
		t.Error("a value sealed for row-1 opens for row-2")
	}
	tampered := []byte(sealed)
	tampered[len(tampered)/2] ^= 1
	if _, err := ring.Open(id, string(tampered), []byte("row-1")); err == nil {
		t.Error("an altered value opens")
	}
	if _, err := ring.Open(id, "%%%", []byte("row-1")); err == nil {
		t.Error("text that is not base64 opens")
	}

	// Rotation: b seals, a still opens what it sealed.
	rotated := seal.NewKeyring(b, a)
	if got, err := rotated.Open(id, sealed, []byte("row-1")); err != nil || string(got) != "hunter2" {
		t.Fatalf("the old key does not open after rotation: %q, %v", got, err)
	}
	if rotated.Current() != b.ID() || !rotated.Has(a.ID()) || !rotated.Has(b.ID()) {
		t.Errorf("rotated keyring: current %s, has a %v, has b %v", rotated.Current(), rotated.Has(a.ID()), rotated.Has(b.ID()))
	}
	if _, err := seal.NewKeyring(b).Open(id, sealed, []byte("row-1")); !errors.Is(err, seal.ErrUnknownKey) {
		t.Errorf("without key a: %v, want ErrUnknownKey", err)
	}
}

func TestNoKey(t *testing.T) {
	t.Parallel()
	var ring *seal.Keyring
	if ring.CanSeal() || ring.Current() != "" || ring.Has("") {
		t.Error("a nil keyring claims a key")
	}
	if _, _, err := ring.Seal([]byte("x"), nil); err == nil {
		t.Error("a nil keyring seals")
	}
	if _, err := ring.Open("abc", "eA==", nil); !errors.Is(err, seal.ErrUnknownKey) {
		t.Errorf("open without keys: %v", err)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "short", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8F", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8FIQ8=AAAA", "!!!!"} {
		if _, err := seal.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("ParseKey(%q): the error quotes the key: %v", bad, err)
		}
	}
	if mustKey(t, keyA).ID() == mustKey(t, keyB).ID() {
		t.Error("two keys with one id")
	}
}
