package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/roomhub/messaging-api/seal"
	"github.com/roomhub/messaging-api/store"
)

// preparePushAuth makes sure this process can open every stored push
// credential (a dispatcher without the key would send requests its
// endpoints refuse; an API process could not show or change the
// subscription), then seals again under PUSH_AUTH_KEY those an older key
// sealed, so that a rotated key can be retired once every process has
// started with the new one. It refuses to start naming the missing keys by
// id, never by value.
func preparePushAuth(ctx context.Context, cfg Config, db *store.DB, logger *slog.Logger) error {
	keys := cfg.PushAuth.Keyring()
	ids, err := db.Subscriptions().PushAuthKeys(ctx)
	if err != nil {
		return fmt.Errorf("push credentials: %w", err)
	}
	var missing []string
	for _, id := range ids {
		if !keys.Has(id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("push credentials (pushAuth) in the database are encrypted with keys %s, which this process does not have: "+
			"set PUSH_AUTH_KEY (and PUSH_AUTH_OLD_KEYS) as on the processes that stored them; a key's id is the hex of the first 8 bytes "+
			"of its SHA-256, as the start-up line logs it (push_auth_key_id)", strings.Join(missing, ", "))
	}
	n, err := db.Subscriptions().ResealPushAuth(ctx)
	if err != nil {
		return fmt.Errorf("push credentials: re-encrypt with PUSH_AUTH_KEY: %w", err)
	}
	if n > 0 {
		logger.InfoContext(ctx, "push credentials re-encrypted with the current key", slog.Int("subscriptions", n),
			slog.String("push_auth_key_id", keys.Current()))
	}
	return nil
}

// embeddedPushAuthKey gives the embedded defaults (`make run`, an SQLite
// file) a push credentials key without configuration, as they get a first
// admin key: a file beside the database, made once (mode 0600) and read at
// every start. Anywhere else PUSH_AUTH_KEY is an operator's decision.
func embeddedPushAuthKey(databaseURL string, logger *slog.Logger) (seal.Key, error) {
	path, _, _ := strings.Cut(strings.TrimPrefix(databaseURL, "sqlite:"), "?")
	if path == "" || strings.HasPrefix(path, ":memory:") {
		return seal.Key{}, nil
	}
	keyPath := path + ".push-auth-key"
	if raw, err := os.ReadFile(keyPath); err == nil {
		k, err := seal.ParseKey(strings.TrimSpace(string(raw)))
		if err != nil {
			return seal.Key{}, fmt.Errorf("%s: %w", keyPath, err)
		}
		return k, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return seal.Key{}, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return seal.Key{}, err
	}
	encoded := base64.StdEncoding.EncodeToString(secret)
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return seal.Key{}, fmt.Errorf("push credentials key: %w", err)
	}
	_, werr := f.WriteString(encoded + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return seal.Key{}, fmt.Errorf("push credentials key: %w", err)
	}
	k, err := seal.ParseKey(encoded)
	if err == nil {
		logger.Info("made a push credentials key for the embedded database (set PUSH_AUTH_KEY elsewhere)",
			slog.String("file", keyPath), slog.String("push_auth_key_id", k.ID()))
	}
	return k, err
}
