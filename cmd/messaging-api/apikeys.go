package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/rooms"
)

// apiKeyUsage is the usage of the apikey command.
const apiKeyUsage = "usage: messaging-api apikey create -role ROLE -name NAME [-subject S] [-room ROOM[=TYPE,TYPE]]... [-expires DURATION]\n" +
	"       messaging-api apikey list\n" +
	"       messaging-api apikey revoke ID\n"

// createFlags are the flags of apikey create.
type createFlags struct {
	fs                  *flag.FlagSet
	role, name, subject *string
	expires             *time.Duration
	grants              []auth.GrantSpec
}

func newCreateFlags(stderr io.Writer) *createFlags {
	f := &createFlags{fs: flag.NewFlagSet("apikey create", flag.ContinueOnError)}
	f.fs.SetOutput(stderr)
	f.fs.Usage = func() {
		fmt.Fprint(stderr, apiKeyUsage+"\nflags of create:\n")
		f.fs.PrintDefaults()
	}
	f.role = f.fs.String("role", "", "admin, manager, publisher or subscriber")
	f.name = f.fs.String("name", "", "what the key is for")
	f.subject = f.fs.String("subject", "", "managers: the managerIdentifier of their rooms; subscribers: the owner of their subscriptions")
	f.expires = f.fs.Duration("expires", 0, "lifetime, e.g. 720h (0: never expires)")
	f.fs.Func("room", "a `ROOM` granted to a publisher or subscriber (its id or identifier), optionally followed by =TYPE,TYPE limiting a publisher's event types; repeat for more", func(v string) error {
		ref, types, _ := strings.Cut(v, "=")
		g := auth.GrantSpec{Room: ref}
		if types != "" {
			g.EventTypes = strings.Split(types, ",")
		}
		f.grants = append(f.grants, g)
		return nil
	})
	return f
}

// apiKeyHelp writes the help of the apikey command.
func apiKeyHelp(w io.Writer) {
	fmt.Fprint(w, "create makes a key and prints it on stdout, once; list shows the keys (by prefix, never\n"+
		"whole); revoke ends one at once. The database is DATABASE_URL from the environment.\n\n")
	newCreateFlags(w).fs.Usage()
}

// runAPIKey is the apikey subcommand: create, list and revoke keys straight
// in the database (the way to make the first admin key).
func runAPIKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("apikey needs a subcommand: create, list or revoke")
	}
	switch args[0] {
	case "create", "list", "revoke":
	case "-h", "-help", "--help", "help":
		apiKeyHelp(stdout)
		return nil
	default:
		return usagef("apikey has no subcommand %q (create, list or revoke)", args[0])
	}
	var create *createFlags
	switch {
	case args[0] == "create":
		create = newCreateFlags(stderr)
		if err := create.fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %w", app.ErrUsage, err)
		}
		if create.fs.NArg() > 0 {
			return usagef("apikey create takes no argument %q", create.fs.Arg(0))
		}
	case args[0] == "list" && len(args) != 1:
		return usagef("apikey list takes no arguments")
	case args[0] == "revoke" && len(args) != 2:
		return usagef("apikey revoke takes one key id")
	}
	_, db, err := app.OpenMigrated(ctx, nil, getenv, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	keys := app.NewKeyService(db, rooms.NewService(rooms.Deps{Store: db.Rooms(), Cleanup: app.NoCleanup{}, Now: app.Clock}))

	switch args[0] {
	case "create":
		spec := auth.Spec{Name: *create.name, Role: *create.role, Subject: *create.subject, Rooms: create.grants}
		if *create.expires > 0 {
			t := app.Clock().Add(*create.expires)
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
	default: // revoke
		k, err := keys.Revoke(ctx, args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "revoked %s key %s (%q)\n", k.Role, k.ID, k.Name)
		return nil
	}
}
