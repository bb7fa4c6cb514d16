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
	_, db, err := app.OpenMigrated(ctx, nil, getenv, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	keys := app.NewKeyService(db, rooms.NewService(rooms.Deps{Store: db.Rooms(), Cleanup: app.NoCleanup{}, Now: app.Clock}))

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
			t := app.Clock().Add(*expires)
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
