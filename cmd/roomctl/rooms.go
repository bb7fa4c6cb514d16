package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/oapi-codegen/nullable"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/roomhub/messaging-api/client"
)

func (a *cli) roomsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rooms",
		Aliases: []string{"room"},
		Short:   "List, show, create, change and delete rooms",
		Long: `Rooms are broker addresses that events are published to, with the delivery defaults
of their subscriptions. ROOM is a room's identifier or its id.`,
		Args: noArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.roomsList(), a.roomsGet(), a.roomsCreate(), a.roomsUpdate(), a.roomsDelete())
	return cmd
}

// page is the --limit and --cursor of a list.
type page struct {
	limit  int
	cursor string
}

func (p *page) flags(f *pflag.FlagSet, def, max int) {
	f.IntVar(&p.limit, "limit", def, fmt.Sprintf("the most items to show (1 to %d)", max))
	f.StringVar(&p.cursor, "cursor", "", "the page after the one that gave this cursor")
}

func (p *page) params() (*int, *string) {
	var cursor *string
	if p.cursor != "" {
		cursor = &p.cursor
	}
	return &p.limit, cursor
}

func (a *cli) roomsList() *cobra.Command {
	var p page
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the rooms the key reaches, in creation order",
		Args:  noArgs,
		RunE: send(a, func(r req) (*client.ListRoomsResponse, error) {
			limit, cursor := p.params()
			return r.c.ListRoomsWithResponse(r.ctx, &client.ListRoomsParams{Limit: limit, Cursor: cursor})
		}, func(t *table, resp *client.ListRoomsResponse) {
			t.row("ID", "IDENTIFIER", "MANAGER", "STATUS", "EXPIRATION", "RETRY", "APPROVAL", "CREATED")
			for _, r := range resp.JSON200.Items {
				t.row(r.Id, r.Identifier, r.ManagerIdentifier, r.Status, expiration(r.MessageExpiration), retry(r), r.SubscriptionApproval, r.CreatedAt)
			}
			t.nextPage(resp.JSON200.NextCursor)
		}),
	}
	p.flags(cmd.Flags(), 50, 500)
	return cmd
}

func (a *cli) roomsGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get ROOM",
		Short: "Show a room",
		Args:  exactArgs("ROOM"),
		RunE: send(a, func(r req) (*client.GetRoomResponse, error) {
			return r.c.GetRoomWithResponse(r.ctx, r.args[0])
		}, func(t *table, resp *client.GetRoomResponse) { roomTable(t, resp.JSON200) }),
	}
}

// roomTable shows one room, field by field.
func roomTable(t *table, r *client.Room) {
	t.row("ID", r.Id)
	t.row("IDENTIFIER", r.Identifier)
	t.row("MANAGER", r.ManagerIdentifier)
	t.row("STATUS", r.Status)
	t.row("ADDRESS", r.Address)
	t.row("MESSAGE EXPIRATION", expiration(r.MessageExpiration))
	t.row("RETRY", retry(*r))
	t.row("SUBSCRIPTION APPROVAL", r.SubscriptionApproval)
	cb := r.CircuitBreaker
	t.row("CIRCUIT BREAKER", fmt.Sprintf("enabled=%v failureRate=%v window=%v minimumAttempts=%v cooldown=%s maxCooldown=%s",
		cb.Enabled, cb.FailureRate, cb.Window, cb.MinimumAttempts, ms(cb.Cooldown), ms(cb.MaxCooldown)))
	t.row("CREATED", r.CreatedAt)
	t.row("UPDATED", r.UpdatedAt)
}

// expiration shows a room's messageExpiration.
func expiration(n nullable.Nullable[int64]) string {
	if v, err := n.Get(); err == nil && v > 0 {
		return ms(v)
	}
	return "never"
}

// retry shows a room's retry settings in one cell.
func retry(r client.Room) string {
	if r.RetryPolicy.IsSpecified() && !r.RetryPolicy.IsNull() {
		return "four-phase retryPolicy"
	}
	s := fmt.Sprintf("%d attempts, %s ×%v", r.DeliveryAttempts, ms(r.DeliveryDelay), r.DeliveryDelayMultiplier)
	if v, err := r.MaxDeliveryDelay.Get(); err == nil {
		s += ", max " + ms(v)
	}
	if r.DeliveryJitter > 0 {
		s += fmt.Sprintf(", jitter %v", r.DeliveryJitter)
	}
	return s
}

// roomFlags are the settings create and update take.
type roomFlags struct {
	manager, identifier         string
	expiration, delay, maxDelay time.Duration
	multiplier, jitter          float64
	attempts                    int32
	approval, status            *choice
	reset                       []string
	bodyFile                    string
}

func (r *roomFlags) flags(f *pflag.FlagSet, update bool) {
	r.approval = newChoice("", "AUTOMATIC", "MANUAL")
	r.status = newChoice("", "ACTIVE", "TERMINATED")
	f.StringVar(&r.manager, "manager", "", "managerIdentifier: the manager key's subject that manages the room")
	f.DurationVar(&r.expiration, "message-expiration", 0, "how long a message lives (0: never)")
	f.DurationVar(&r.delay, "delivery-delay", 0, "the first retry's delay (exponential backoff retry)")
	f.Float64Var(&r.multiplier, "delivery-delay-multiplier", 0, "the factor each retry's delay grows by (1 to 1000)")
	f.Int32Var(&r.attempts, "delivery-attempts", 0, "the most delivery attempts of a message (0 or 1: no retry)")
	f.DurationVar(&r.maxDelay, "max-delivery-delay", 0, "the cap on each retry's delay (default 7 days)")
	f.Float64Var(&r.jitter, "delivery-jitter", 0, "spread of the retry delays, 0 to 1")
	f.Var(r.approval, "subscription-approval", "whether new subscriptions of subscriber keys wait for the manager's approval")
	f.StringVar(&r.bodyFile, "body-file", "", "a JSON file (- for standard input) with the request body (for the fields without a flag, such as retryPolicy and circuitBreaker); flags given override it")
	if update {
		f.StringVar(&r.identifier, "identifier", "", "rename the room (its id and broker address stay)")
		f.Var(r.status, "status", "ACTIVE, or TERMINATED (it then takes no more events)")
		f.StringSliceVar(&r.reset, "reset", nil, "fields to set to null: message-expiration, max-delivery-delay, retry-policy, circuit-breaker")
	}
}

// roomFields are the fields of a create or update body the flags set.
type roomFields struct {
	manager              **string
	expiration, maxDelay *nullable.Nullable[int64]
	delay                **int64
	multiplier, jitter   **float64
	attempts             **int32
	approval             **client.SubscriptionApproval
}

// apply sets the fields the flags given set.
func (r *roomFlags) apply(set func(string) bool, b roomFields) {
	if set("manager") {
		*b.manager = &r.manager
	}
	if set("message-expiration") {
		b.expiration.Set(r.expiration.Milliseconds())
	}
	if set("delivery-delay") {
		v := r.delay.Milliseconds()
		*b.delay = &v
	}
	if set("delivery-delay-multiplier") {
		*b.multiplier = &r.multiplier
	}
	if set("delivery-attempts") {
		*b.attempts = &r.attempts
	}
	if set("delivery-jitter") {
		*b.jitter = &r.jitter
	}
	if set("max-delivery-delay") {
		b.maxDelay.Set(r.maxDelay.Milliseconds())
	}
	if set("subscription-approval") {
		v := client.SubscriptionApproval(r.approval.value)
		*b.approval = &v
	}
}

func (a *cli) roomsCreate() *cobra.Command {
	var r roomFlags
	cmd := &cobra.Command{
		Use:   "create IDENTIFIER",
		Short: "Create a room",
		Long: `Create a room named IDENTIFIER. Without flags the service's defaults apply: messages
never expire, 3 attempts, 1s ×2.0 backoff.`,
		Example: `  roomctl rooms create orders --manager team-orders --message-expiration 1h --delivery-attempts 5 --delivery-delay 500ms`,
		Args:    exactArgs("IDENTIFIER"),
	}
	cmd.RunE = send(a, func(q req) (*client.CreateRoomResponse, error) {
		var body client.RoomCreate
		if err := a.bodyFile(r.bodyFile, &body); err != nil {
			return nil, err
		}
		body.Identifier = q.args[0]
		r.apply(cmd.Flags().Changed, roomFields{manager: &body.ManagerIdentifier, expiration: &body.MessageExpiration,
			maxDelay: &body.MaxDeliveryDelay, delay: &body.DeliveryDelay, multiplier: &body.DeliveryDelayMultiplier,
			jitter: &body.DeliveryJitter, attempts: &body.DeliveryAttempts, approval: &body.SubscriptionApproval})
		return q.c.CreateRoomWithResponse(q.ctx, body)
	}, func(t *table, resp *client.CreateRoomResponse) { roomTable(t, resp.JSON201) })
	r.flags(cmd.Flags(), false)
	return cmd
}

func (a *cli) roomsUpdate() *cobra.Command {
	var r roomFlags
	cmd := &cobra.Command{
		Use:     "update ROOM",
		Short:   "Change a room's settings (only those given)",
		Example: "  roomctl rooms update orders --delivery-attempts 7 --reset message-expiration",
		Args:    exactArgs("ROOM"),
	}
	cmd.RunE = send(a, func(q req) (*client.UpdateRoomResponse, error) {
		var body client.RoomPatch
		if err := a.bodyFile(r.bodyFile, &body); err != nil {
			return nil, err
		}
		set := cmd.Flags().Changed
		r.apply(set, roomFields{manager: &body.ManagerIdentifier, expiration: &body.MessageExpiration,
			maxDelay: &body.MaxDeliveryDelay, delay: &body.DeliveryDelay, multiplier: &body.DeliveryDelayMultiplier,
			jitter: &body.DeliveryJitter, attempts: &body.DeliveryAttempts, approval: &body.SubscriptionApproval})
		if set("identifier") {
			body.Identifier = &r.identifier
		}
		if set("status") {
			v := client.RoomStatus(r.status.value)
			body.Status = &v
		}
		for _, field := range r.reset {
			switch strings.TrimSpace(field) {
			case "message-expiration":
				body.MessageExpiration.SetNull()
			case "max-delivery-delay":
				body.MaxDeliveryDelay.SetNull()
			case "retry-policy":
				body.RetryPolicy.SetNull()
			case "circuit-breaker":
				body.CircuitBreaker.SetNull()
			default:
				return nil, usagef("--reset: no field %q (message-expiration, max-delivery-delay, retry-policy, circuit-breaker)", field)
			}
		}
		return q.c.UpdateRoomWithResponse(q.ctx, q.args[0], body)
	}, func(t *table, resp *client.UpdateRoomResponse) { roomTable(t, resp.JSON200) })
	r.flags(cmd.Flags(), true)
	return cmd
}

func (a *cli) roomsDelete() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete ROOM",
		Short: "Delete a room with its event types and versions",
		Long:  "Delete a room with its event types and versions. A room that has subscriptions is refused (409) unless --force, which deletes them too, with their dead letters and PULL queues.",
		Args:  exactArgs("ROOM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(a, func(r req) (*client.DeleteRoomResponse, error) {
				return r.c.DeleteRoomWithResponse(r.ctx, args[0], &client.DeleteRoomParams{Force: &force})
			}, done[*client.DeleteRoomResponse]("deleted room "+args[0]))(cmd, args)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the room's subscriptions too")
	return cmd
}

// bodyFile decodes the JSON body file name (- for standard input), if
// given, into body, refusing unknown fields.
func (a *cli) bodyFile(name string, body any) error {
	if name == "" {
		return nil
	}
	raw, err := a.input(name)
	if err != nil {
		return err
	}
	return decodeStrict(raw, body, "--body-file "+name)
}
