package main

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/client"
)

func (a *cli) eventTypesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "event-types",
		Aliases: []string{"event-type", "et"},
		Short:   "List, show, create and delete a room's event types, and their versions",
		Long:    "An event type is a kind of event published to a room; each has numbered versions, each with a JSON Schema that the payloads of that version must follow.",
		Args:    noArgs,
		RunE:    groupRun,
	}
	list := func() *cobra.Command {
		var p page
		c := &cobra.Command{
			Use:   "list ROOM",
			Short: "List a room's event types, by identifier",
			Args:  exactArgs("ROOM"),
			RunE: send(a, func(r req) (*client.ListEventTypesResponse, error) {
				limit, cursor := p.params()
				return r.c.ListEventTypesWithResponse(r.ctx, r.args[0], &client.ListEventTypesParams{Limit: limit, Cursor: cursor})
			}, func(t *table, resp *client.ListEventTypesResponse) {
				t.row("IDENTIFIER", "DESCRIPTION", "CREATED")
				for _, e := range resp.JSON200.Items {
					t.row(e.Identifier, truncate(e.Description, 60), e.CreatedAt)
				}
				t.nextPage(resp.JSON200.NextCursor)
			}),
		}
		p.flags(c.Flags(), 100, 500)
		return c
	}
	get := &cobra.Command{
		Use:   "get ROOM EVENT-TYPE",
		Short: "Show an event type",
		Args:  exactArgs("ROOM", "EVENT-TYPE"),
		RunE: send(a, func(r req) (*client.GetEventTypeResponse, error) {
			return r.c.GetEventTypeWithResponse(r.ctx, r.args[0], r.args[1])
		}, func(t *table, resp *client.GetEventTypeResponse) { eventTypeTable(t, resp.JSON200) }),
	}
	create := func() *cobra.Command {
		var description string
		c := &cobra.Command{
			Use:     "create ROOM EVENT-TYPE",
			Short:   "Create an event type",
			Example: `  roomctl event-types create orders order.created --description "A customer placed an order"`,
			Args:    exactArgs("ROOM", "EVENT-TYPE"),
			RunE: func(cmd *cobra.Command, args []string) error {
				body := client.EventTypeCreate{Identifier: args[1]}
				if cmd.Flags().Changed("description") {
					body.Description = &description
				}
				return send(a, func(q req) (*client.CreateEventTypeResponse, error) {
					return q.c.CreateEventTypeWithResponse(q.ctx, args[0], body)
				}, func(t *table, resp *client.CreateEventTypeResponse) { eventTypeTable(t, resp.JSON201) })(cmd, args)
			},
		}
		c.Flags().StringVar(&description, "description", "", "what the events of this type are")
		return c
	}
	del := &cobra.Command{
		Use:   "delete ROOM EVENT-TYPE",
		Short: "Delete an event type and its versions (refused while a subscription names it)",
		Args:  exactArgs("ROOM", "EVENT-TYPE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(a, func(r req) (*client.DeleteEventTypeResponse, error) {
				return r.c.DeleteEventTypeWithResponse(r.ctx, args[0], args[1])
			}, done[*client.DeleteEventTypeResponse]("deleted event type "+args[1]))(cmd, args)
		},
	}
	cmd.AddCommand(list(), get, create(), del, a.versionsCommand())
	return cmd
}

func eventTypeTable(t *table, e *client.EventType) {
	t.row("ID", e.Id)
	t.row("IDENTIFIER", e.Identifier)
	t.row("DESCRIPTION", e.Description)
	t.row("ROOM ID", e.RoomId)
	t.row("CREATED", e.CreatedAt)
}

func (a *cli) versionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "versions",
		Aliases: []string{"version"},
		Short:   "List, show, create and delete the versions (JSON Schemas) of an event type",
		Args:    noArgs,
		RunE:    groupRun,
	}
	list := &cobra.Command{
		Use:   "list ROOM EVENT-TYPE",
		Short: "List the versions of an event type, oldest first",
		Args:  exactArgs("ROOM", "EVENT-TYPE"),
		RunE: send(a, func(r req) (*client.ListVersionsResponse, error) {
			return r.c.ListVersionsWithResponse(r.ctx, r.args[0], r.args[1])
		}, func(t *table, resp *client.ListVersionsResponse) {
			t.row("VERSION", "CREATED", "SCHEMA")
			for _, v := range resp.JSON200.Items {
				t.row(v.Version, v.CreatedAt, truncate(string(v.Schema), 80))
			}
		}),
	}
	get := &cobra.Command{
		Use:   "get ROOM EVENT-TYPE VERSION",
		Short: "Show a version with its schema",
		Args:  exactArgs("ROOM", "EVENT-TYPE", "VERSION"),
		RunE: send(a, onVersion(func(r req, n int) (*client.GetVersionResponse, error) {
			return r.c.GetVersionWithResponse(r.ctx, r.args[0], r.args[1], n)
		}), func(t *table, resp *client.GetVersionResponse) { versionTable(t, resp.JSON200) }),
	}
	create := func() *cobra.Command {
		var (
			schema, schemaFile string
			version            int
		)
		c := &cobra.Command{
			Use:   "create ROOM EVENT-TYPE",
			Short: "Add a version: a JSON Schema the payloads of that version must follow",
			Long: `Add a version to an event type: a JSON Schema (draft 2020-12 unless its $schema says
otherwise), given inline (--schema) or in a file (--schema-file, - for standard
input). Without --version it gets the next number.`,
			Example: `  roomctl event-types versions create orders order.created --schema-file order-created.schema.json
  echo '{"type":"object","required":["orderId"]}' | roomctl event-types versions create orders order.created --schema-file -`,
			Args: exactArgs("ROOM", "EVENT-TYPE"),
			RunE: func(cmd *cobra.Command, args []string) error {
				doc, ok, err := a.jsonInput(schema, schemaFile, "schema", "schema-file")
				if err != nil {
					return err
				}
				if !ok {
					return usagef("give the schema with --schema or --schema-file (- for standard input)")
				}
				body := client.VersionCreate{Schema: doc}
				if cmd.Flags().Changed("version") {
					body.Version = &version
				}
				return send(a, func(q req) (*client.CreateVersionResponse, error) {
					return q.c.CreateVersionWithResponse(q.ctx, args[0], args[1], body)
				}, func(t *table, resp *client.CreateVersionResponse) { versionTable(t, resp.JSON201) })(cmd, args)
			},
		}
		c.Flags().StringVar(&schema, "schema", "", "the JSON Schema, inline")
		c.Flags().StringVar(&schemaFile, "schema-file", "", "a file holding the JSON Schema (- for standard input)")
		c.Flags().IntVar(&version, "version", 0, "the version number (default: one more than the highest)")
		c.MarkFlagsMutuallyExclusive("schema", "schema-file")
		return c
	}
	del := &cobra.Command{
		Use:   "delete ROOM EVENT-TYPE VERSION",
		Short: "Delete a version (refused while a subscription names it)",
		Args:  exactArgs("ROOM", "EVENT-TYPE", "VERSION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(a, onVersion(func(r req, n int) (*client.DeleteVersionResponse, error) {
				return r.c.DeleteVersionWithResponse(r.ctx, args[0], args[1], n)
			}), done[*client.DeleteVersionResponse]("deleted version "+args[2]+" of "+args[1]))(cmd, args)
		},
	}
	cmd.AddCommand(list, get, create(), del)
	return cmd
}

// onVersion is a call on the version of the arguments ROOM EVENT-TYPE
// VERSION.
func onVersion[R any](f func(r req, version int) (R, error)) func(req) (R, error) {
	return func(r req) (R, error) {
		n, err := strconv.Atoi(r.args[2])
		if err != nil || n < 1 {
			var none R
			return none, usagef("VERSION must be a version number (1, 2, ...), not %q", r.args[2])
		}
		return f(r, n)
	}
}

func versionTable(t *table, v *client.Version) {
	t.row("EVENT TYPE", v.EventType)
	t.row("VERSION", v.Version)
	t.row("CREATED", v.CreatedAt)
	var pretty bytes.Buffer
	if json.Indent(&pretty, v.Schema, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(v.Schema)
	}
	_ = t.flush()
	_, t.err = t.tw.Write([]byte("SCHEMA\n" + pretty.String() + "\n"))
}
