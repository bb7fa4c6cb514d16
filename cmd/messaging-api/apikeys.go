package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

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

// noCleanup is the room cleanup of processes that never delete rooms.
type noCleanup struct{}

func (noCleanup) RoomDeleted(context.Context, uuid.UUID, []uuid.UUID) {}

func newKeyService(db *store.DB, roomSvc *rooms.Service) *auth.Service {
	return auth.NewService(db.Keys(), roomFinder{roomSvc}, clock)
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
		"  Send it as \"Authorization: Bearer $API_KEY\". More keys: POST /v1/api-keys or `messaging-api apikey create`.\n\n",
		k.ID, token)
	return nil
}

// openMigrated reads the configuration (flags from args) and opens and
// migrates the database for a one-shot subcommand, which logs only warnings
// (to stderr).
func openMigrated(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) (Config, *store.DB, error) {
	cfg, err := loadConfig(args, getenv, stderr)
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

// runAPIKey is the apikey subcommand: create, list and revoke keys straight
// in the database (the way to make the first admin key).
func runAPIKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	usage := "usage: messaging-api apikey create -role ROLE -name NAME [-subject S] [-room ROOM[=TYPE,TYPE]]... [-expires DURATION]\n" +
		"       messaging-api apikey list\n" +
		"       messaging-api apikey revoke ID\n" +
		"(the database is DATABASE_URL from the environment)"
	if len(args) == 0 {
		return errors.New(usage)
	}
	_, db, err := openMigrated(ctx, nil, getenv, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	keys := newKeyService(db, rooms.NewService(db.Rooms(), noCleanup{}, clock))

	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("apikey create", flag.ContinueOnError)
		fs.SetOutput(stderr)
		role := fs.String("role", "", "admin, manager, publisher or subscriber")
		name := fs.String("name", "", "what the key is for")
		subject := fs.String("subject", "", "managers: the managerIdentifier of their rooms; subscribers: the owner of their subscriptions")
		expires := fs.Duration("expires", 0, "lifetime, e.g. 720h (0: never expires)")
		var grants []auth.GrantSpec
		fs.Func("room", "a room granted to a publisher or subscriber (id or identifier), optionally =TYPE,TYPE limiting a publisher's event types; repeat for more", func(v string) error {
			ref, types, _ := strings.Cut(v, "=")
			g := auth.GrantSpec{Room: ref}
			if types != "" {
				g.EventTypes = strings.Split(types, ",")
			}
			grants = append(grants, g)
			return nil
		})
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		spec := auth.Spec{Name: *name, Role: *role, Subject: *subject, Rooms: grants}
		if *expires > 0 {
			t := clock().Add(*expires)
			spec.ExpiresAt = &t
		}
		k, token, err := keys.Create(ctx, spec)
		var ve *api.ValidationError
		if errors.As(err, &ve) {
			for _, f := range ve.Fields {
				fmt.Fprintf(stderr, "%s: %s\n", f.Field, f.Message)
			}
			return errors.New("the key was not created")
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "created %s key %s (%q); the key is shown only now:\n", k.Role, k.ID, k.Name)
		fmt.Fprintln(stdout, token)
		return nil
	case "list":
		ks, err := keys.Keys(ctx, api.Page{Limit: 10000})
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tPREFIX\tROLE\tSUBJECT\tNAME\tSTATE")
		now := time.Now()
		for _, k := range ks {
			state := "active"
			switch {
			case k.RevokedAt != nil:
				state = "revoked " + k.RevokedAt.Format(time.RFC3339)
			case !k.Active(now):
				state = "expired"
			}
			fmt.Fprintf(w, "%s\t%s…\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Role, k.Subject, k.Name, state)
		}
		return w.Flush()
	case "revoke":
		if len(args) != 2 {
			return errors.New(usage)
		}
		k, err := keys.Revoke(ctx, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "revoked %s key %s (%q)\n", k.Role, k.ID, k.Name)
		return nil
	}
	return errors.New(usage)
}
