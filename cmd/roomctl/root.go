package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/client"
)

// The environment variables of the service's address and API key.
const (
	envURL = "MESSAGING_API_URL"
	envKey = "MESSAGING_API_KEY"
)

// cli is one run of roomctl: its streams, environment and global flags.
type cli struct {
	streams
	getenv func(string) string

	url, apiKey string
	output      choice
	timeout     time.Duration

	api *client.ClientWithResponses // made on first use
}

// The output formats.
const (
	outputTable = "table"
	outputJSON  = "json"
)

func (a *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "roomctl",
		Short: "A command-line client of the messaging API",
		Long: `roomctl manages rooms, event types, versions and subscriptions of the messaging
API, publishes events, shows a message's timeline, lists and replays dead letters,
pulls a PULL subscription, and checks the signature of a push request.

The service's address and an API key come from --url and --api-key, or from
` + envURL + ` and ` + envKey + ` (the flags win). Output is a table for people
(-o table, the default) or the API's JSON as it answered (-o json), for scripts.

Exit codes: 0 done; 1 the API refused the request (its problem is printed: title,
detail and each field it names), or a part of the work failed (a published line,
a signature); 2 the command line is wrong (unknown command or flag, bad value,
missing argument, no URL or key); 3 the service could not be reached or did not
answer within --timeout; 130 interrupted (Ctrl-C).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE:          groupRun,
	}
	a.output = choice{value: outputTable, allowed: []string{outputTable, outputJSON}}
	f := root.PersistentFlags()
	f.StringVar(&a.url, "url", "", "the service's base URL, such as http://localhost:8080 (default $"+envURL+")")
	f.StringVar(&a.apiKey, "api-key", "", "the API key, mapi_... (default $"+envKey+"; the variable keeps it out of the process list)")
	f.VarP(&a.output, "output", "o", "output format: table (for people) or json (the API's answers as they are, for scripts)")
	f.DurationVar(&a.timeout, "timeout", 30*time.Second, "how long one request may take (a pull's wait comes on top)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(a.output.allowed, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		a.roomsCommand(),
		a.eventTypesCommand(),
		a.subscriptionsCommand(),
		a.publishCommand(),
		a.messagesCommand(),
		a.deadLettersCommand(),
		a.listenCommand(),
		a.verifyCommand(),
	)
	completeArgs(root, a.completeArg)
	return root
}

// completeArgs gives every command under c whose usage names its arguments
// (get ROOM SUBSCRIPTION) a completion of them by complete.
func completeArgs(c *cobra.Command, complete func(name string, args []string) []cobra.Completion) {
	for _, sub := range c.Commands() {
		completeArgs(sub, complete)
	}
	names := strings.Fields(c.Use)[1:]
	if len(names) == 0 || c.ValidArgsFunction != nil {
		return
	}
	c.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(names) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return complete(strings.Trim(names[len(args)], "[].-"), args), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeArg lists the values of the argument name (ROOM, SUBSCRIPTION,
// EVENT-TYPE) after args, as far as the first page of a list shows them;
// nothing when the service cannot be asked.
func (a *cli) completeArg(name string, args []string) []cobra.Completion {
	c, err := a.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	limit := 500
	var out []cobra.Completion
	switch {
	case name == "ROOM":
		resp, err := c.ListRoomsWithResponse(ctx, &client.ListRoomsParams{Limit: &limit})
		if err == nil && resp.JSON200 != nil {
			for _, r := range resp.JSON200.Items {
				out = append(out, cobra.CompletionWithDesc(r.Identifier, "managed by "+r.ManagerIdentifier))
			}
		}
	case name == "SUBSCRIPTION" && len(args) > 0:
		resp, err := c.ListSubscriptionsWithResponse(ctx, args[0], &client.ListSubscriptionsParams{Limit: &limit})
		if err == nil && resp.JSON200 != nil {
			for _, s := range resp.JSON200.Items {
				out = append(out, cobra.CompletionWithDesc(s.Id.String(), fmt.Sprintf("%s %s %s", s.Type, s.Status, eventTypes(s.EventTypes))))
			}
		}
	case name == "EVENT-TYPE" && len(args) > 0:
		resp, err := c.ListEventTypesWithResponse(ctx, args[0], &client.ListEventTypesParams{Limit: &limit})
		if err == nil && resp.JSON200 != nil {
			for _, e := range resp.JSON200.Items {
				out = append(out, cobra.CompletionWithDesc(e.Identifier, e.Description))
			}
		}
	}
	return out
}

// client returns the API client of the URL and key the flags or the
// environment give, or a usage error saying which is missing.
func (a *cli) client() (*client.ClientWithResponses, error) {
	if a.api != nil {
		return a.api, nil
	}
	base, key := a.url, a.apiKey
	if base == "" {
		base = a.getenv(envURL)
	}
	if key == "" {
		key = a.getenv(envKey)
	}
	if base == "" {
		return nil, usageError{fmt.Errorf("no service URL: set %s or pass --url (such as http://localhost:8080)", envURL)}
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("the service URL %q is not an http:// or https:// URL", base)}
	}
	if key == "" {
		return nil, usageError{fmt.Errorf("no API key: set %s or pass --api-key (make one with messaging-api apikey create)", envKey)}
	}
	// Each request is bounded by its context (see call); the HTTP
	// client's own timeout would cut a long pull short.
	c, err := client.New(strings.TrimSuffix(base, "/"), key,
		client.WithHTTPClient(&http.Client{}),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("User-Agent", "roomctl")
			return nil
		}))
	if err != nil {
		return nil, usageError{err}
	}
	a.api = c
	return c, nil
}

// call returns the API client and a context for one request, bounded by
// --timeout.
func (a *cli) call(cmd *cobra.Command) (*client.ClientWithResponses, context.Context, context.CancelFunc, error) {
	c, err := a.client()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	return c, ctx, cancel, nil
}

// req is one request of a command: its context, the client, the
// command's arguments.
type req struct {
	ctx  context.Context
	c    *client.ClientWithResponses
	args []string
}

// send is the RunE of a command that makes one request and shows the
// answer: call makes it, table shows it for people (-o json shows the
// answer as it is).
func send[R client.Answer](a *cli, call func(r req) (R, error), show func(t *table, resp R)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, ctx, cancel, err := a.call(cmd)
		if err != nil {
			return err
		}
		defer cancel()
		resp, err := call(req{ctx: ctx, c: c, args: args})
		return a.show(resp, err, func(t *table) { show(t, resp) })
	}
}

// done is the table of an answer with no body: what was done.
func done[R any](what string) func(t *table, _ R) {
	return func(t *table, _ R) { t.row(what) }
}

func (a *cli) json() bool { return a.output.value == outputJSON }

// show writes an answer: its body as it is with -o json, else what table
// writes. A request that failed, or an answer that is not a 2xx, is the
// error returned.
func (a *cli) show(resp client.Answer, err error, table func(t *table)) error {
	if err := a.check(resp, err); err != nil {
		return err
	}
	if a.json() {
		return a.writeJSON(resp.GetBody())
	}
	t := newTable(a.out)
	table(t)
	if err := t.flush(); err != nil {
		return err
	}
	for _, n := range t.notes {
		fmt.Fprintln(a.err, n)
	}
	return nil
}

// check is the error of a request: err when it could not be made, an
// apiError for an answer that is not a 2xx, else nil.
func (a *cli) check(resp client.Answer, err error) error {
	if err != nil {
		return requestError(err)
	}
	if err := client.Check(resp); err != nil {
		var p *client.Problem
		if errors.As(err, &p) {
			return apiError{problem: p, body: resp.GetBody(), contentType: resp.ContentType()}
		}
		return err
	}
	return nil
}

// groupRun is the RunE of a command that only groups others: without
// arguments it shows its help.
func groupRun(cmd *cobra.Command, _ []string) error {
	return cmd.Help()
}

// noArgs refuses arguments with a usage error: for a group command, an
// unknown subcommand.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return usageError{fmt.Errorf("%s takes no arguments, not %q", cmd.CommandPath(), args[0])}
}

// exactArgs is cobra.ExactArgs naming the arguments in a usage error.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageError{fmt.Errorf("%s takes %s, got %d argument(s)", cmd.CommandPath(), strings.Join(names, " "), len(args))}
		}
		for i, v := range args {
			if strings.TrimSpace(v) == "" {
				return usageError{fmt.Errorf("%s is empty", names[i])}
			}
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs naming the arguments in a usage error.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError{fmt.Errorf("%s takes %s, got %d argument(s)", cmd.CommandPath(), names, len(args))}
		}
		return nil
	}
}
