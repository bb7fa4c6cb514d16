package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
