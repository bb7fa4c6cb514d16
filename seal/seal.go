// Package seal encrypts the credentials the service must store and use
// again, the push endpoint authentication of subscriptions, with AES-256-GCM
// under keys from configuration, so that a copy of the database (a backup, a
// read replica, a leaked dump) does not reveal them. Hashing cannot do: the
// dispatcher must send them as they are.
//
// A Keyring holds the current key, which seals, and older keys, which only
// open what they sealed; each sealed value names its key by id (a digest of
// the key), so keys can be rotated without rewriting everything at once.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// ErrUnknownKey means a value was sealed with a key the Keyring lacks.
var ErrUnknownKey = errors.New("sealed with a key this process does not have")

// Key is one AES-256-GCM key with its id.
type Key struct {
	id   string
	aead cipher.AEAD
}

// ID names the key in sealed values and logs: the first 8 bytes of the
// SHA-256 of the key, in hex, which reveal nothing useful about it.
func (k Key) ID() string { return k.id }

// ParseKey reads a key written as the standard base64 of 32 random bytes
// (`openssl rand -base64 32`).
func ParseKey(s string) (Key, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(raw) != KeySize {
		return Key{}, fmt.Errorf("must be the base64 of %d random bytes (openssl rand -base64 %d)", KeySize, KeySize)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return Key{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return Key{}, err
	}
	sum := sha256.Sum256(raw)
	return Key{id: hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// Keyring seals with its current key and opens with any of its keys. The
// zero Keyring has no key: it opens and seals nothing.
type Keyring struct {
	current Key
	old     []Key
}

// NewKeyring seals with current and also opens what old keys sealed.
func NewKeyring(current Key, old ...Key) *Keyring {
	old = slices.DeleteFunc(slices.Clone(old), func(k Key) bool { return k.id == current.id })
	return &Keyring{current: current, old: old}
}

// CanSeal reports whether the keyring has a current key (a nil one has none).
func (r *Keyring) CanSeal() bool { return r != nil && r.current.aead != nil }

// Current is the id of the key that seals, "" for none.
func (r *Keyring) Current() string {
	if !r.CanSeal() {
		return ""
	}
	return r.current.id
}

// Has reports whether the keyring opens what key id sealed.
func (r *Keyring) Has(id string) bool {
	_, ok := r.key(id)
	return ok
}

func (r *Keyring) key(id string) (Key, bool) {
	if r == nil {
		return Key{}, false
	}
	if r.current.aead != nil && r.current.id == id {
		return r.current, true
	}
	for _, k := range r.old {
		if k.id == id {
			return k, true
		}
	}
	return Key{}, false
}

// Seal encrypts plaintext with the current key, bound to context (the id of
// the row it belongs to, say: a sealed value copied onto another row does
// not open there). It returns the key's id and the base64 of nonce and
// ciphertext.
func (r *Keyring) Seal(plaintext, context []byte) (keyID, sealed string, err error) {
	if !r.CanSeal() {
		return "", "", errors.New("no key to seal with")
	}
	aead := r.current.aead
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", "", err
	}
	out := aead.Seal(nonce, nonce, plaintext, context)
	return r.current.id, base64.StdEncoding.EncodeToString(out), nil
}

// Open decrypts what Seal returned with the same context; ErrUnknownKey
// when key keyID is not in the keyring.
func (r *Keyring) Open(keyID, sealed string, context []byte) ([]byte, error) {
	k, ok := r.key(keyID)
	if !ok {
		return nil, fmt.Errorf("key %s: %w", keyID, ErrUnknownKey)
	}
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(raw) < k.aead.NonceSize() {
		return nil, fmt.Errorf("key %s: not a sealed value", keyID)
	}
	n := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, raw[:n], raw[n:], context)
	if err != nil {
		return nil, fmt.Errorf("key %s: the sealed value does not open (altered, or sealed for another row)", keyID)
	}
	return plain, nil
}
