package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
)

// roomFinder resolves room references for key grants.
type roomFinder struct{ rooms *rooms.Service }

func (f roomFinder) RoomID(ctx context.Context, ref string) (uuid.UUID, error) {
	r, err := f.rooms.Room(ctx, ref)
	return r.ID, err
}

// NoCleanup is the room cleanup of processes that never delete rooms.
type NoCleanup struct{}

func (NoCleanup) RoomDeleted(context.Context, uuid.UUID, []uuid.UUID) {}

// NewKeyService builds the API key service over db.
func NewKeyService(db *store.DB, roomSvc *rooms.Service) *auth.Service {
	return auth.NewService(db.Keys(), roomFinder{roomSvc}, Clock)
}

// prepareAuth runs before an API process serves: it stores the bootstrap
// key, and makes sure someone can get in. With the embedded SQLite default
// (make run) a first admin key is made and printed; anywhere else a service
// without any key refuses to start.
func prepareAuth(ctx context.Context, cfg Config, keys *auth.Service, logger *slog.Logger, stderr io.Writer) error {
	if cfg.Auth.Disabled {
		logger.Warn("authentication is disabled (AUTH_DISABLED=true): every request may do anything")
		return nil
	}
	if t := cfg.Auth.BootstrapAdminKey; t != "" {
		created, err := keys.Import(ctx, t, auth.Spec{Name: "bootstrap admin key (AUTH_BOOTSTRAP_ADMIN_KEY)", Role: api.RoleAdmin})
		if err != nil {
			return fmt.Errorf("AUTH_BOOTSTRAP_ADMIN_KEY: %w", err)
		}
		if created {
			logger.Info("stored the bootstrap admin API key")
		}
	}
	n, err := keys.ActiveKeys(ctx, "")
	if err != nil || n > 0 {
		return err
	}
	if !strings.HasPrefix(cfg.DatabaseURL, "sqlite:") {
		return errors.New("no API key exists, so nobody could use the API: create the first admin key with " +
			"`messaging-api apikey create -role admin -name NAME` (same DATABASE_URL), or set AUTH_BOOTSTRAP_ADMIN_KEY, " +
			"or set AUTH_DISABLED=true on a trusted network")
	}
	k, token, err := keys.Create(ctx, auth.Spec{Name: "first admin key (embedded defaults)", Role: api.RoleAdmin})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "\n"+
		"  A first admin API key was made (%s). It is shown only now; keep it:\n\n"+
		"    export API_KEY=%s\n\n"+
		"  Send it as \"Authorization: Bearer $API_KEY\". More keys: POST /v1/api-keys or `messaging-api apikey create`.\n",
		k.ID, token)
	if cfg.Console.Enabled {
		fmt.Fprintf(stderr, "  Or sign in with it to the web console: %s\n", ConsoleURL(cfg.HTTP.Addr))
	}
	fmt.Fprintln(stderr)
	return nil
}

// OpenMigrated reads the configuration (flags from args) and opens and
// migrates the database for a one-shot subcommand, which logs only warnings
// (to stderr).
func OpenMigrated(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) (Config, *store.DB, error) {
	cfg, err := LoadConfig(args, getenv, stderr)
	if err != nil {
		return cfg, nil, err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := store.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return cfg, nil, err
	}
	if _, err := db.Migrate(ctx, logger); err != nil {
		_ = db.Close()
		return cfg, nil, fmt.Errorf("migrate: %w", err)
	}
	return cfg, db, nil
}
