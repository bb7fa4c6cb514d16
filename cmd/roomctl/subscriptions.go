package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/oapi-codegen/nullable"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/roomhub/messaging-api/client"
)

func (a *cli) subscriptionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "subscriptions",
		Aliases: []string{"subscription", "subs", "sub"},
		Short:   "Create, show, change, pause, resume and delete subscriptions; rotate secrets, approve, reject, test",
		Long: `A subscription receives the events of a room that its event types (and attribute
filter) take: a PUSH subscription gets each POSTed to its push URL, a PULL one has a
queue to pull from (roomctl listen). SUBSCRIPTION is a subscription's id.`,
		Args: noArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.subsList(), a.subsGet(), a.subsCreate(), a.subsUpdate(), a.subsDelete(),
		a.subsStatus("pause", "PAUSED", "Pause a subscription: it receives no new events and holds those it has"),
		a.subsStatus("resume", "ACTIVE", "Resume a PAUSED subscription (a PUSH one's circuit closes)"),
		a.subsRotate(), a.subsApprove(), a.subsReject(), a.subsTest(), a.subsCircuitReset())
	return cmd
}

// parseID reads an id argument (a UUID) named what.
func parseID(what, arg string) (uuid.UUID, error) {
	id, err := uuid.Parse(arg)
	if err != nil {
		return uuid.Nil, usagef("%s must be an id (a UUID), not %q", what, arg)
	}
	return id, nil
}

// onSub is a call on the subscription of the arguments ROOM SUBSCRIPTION.
func onSub[R any](f func(r req, room string, id uuid.UUID) (R, error)) func(req) (R, error) {
	return func(r req) (R, error) {
		id, err := parseID("SUBSCRIPTION", r.args[1])
		if err != nil {
			var none R
			return none, err
		}
		return f(r, r.args[0], id)
	}
}

// showSubscription is the table of an answer that is a subscription.
func showSubscription[R interface{ GetJSON200() *client.Subscription }](t *table, resp R) {
	subscriptionTable(t, resp.GetJSON200())
}

func (a *cli) subsList() *cobra.Command {
	var p page
	typ := newChoice("", "PUSH", "PULL")
	status := newChoice("", "ACTIVE", "PAUSED", "PENDING", "REJECTED", "TERMINATED")
	cmd := &cobra.Command{
		Use:     "list ROOM",
		Short:   "List a room's subscriptions, in creation order",
		Example: "  roomctl subscriptions list orders --status PENDING",
		Args:    exactArgs("ROOM"),
		RunE: send(a, func(r req) (*client.ListSubscriptionsResponse, error) {
			limit, cursor := p.params()
			params := &client.ListSubscriptionsParams{Limit: limit, Cursor: cursor}
			if typ.value != "" {
				v := client.SubscriptionType(typ.value)
				params.Type = &v
			}
			if status.value != "" {
				v := client.SubscriptionStatus(status.value)
				params.Status = &v
			}
			return r.c.ListSubscriptionsWithResponse(r.ctx, r.args[0], params)
		}, func(t *table, resp *client.ListSubscriptionsResponse) {
			t.row("ID", "TYPE", "STATUS", "EVENT TYPES", "TARGET", "OWNER", "CREATED")
			for _, s := range resp.JSON200.Items {
				t.row(s.Id, s.Type, s.Status, eventTypes(s.EventTypes), target(s), orNull(s.Owner, str), s.CreatedAt)
			}
			t.nextPage(resp.JSON200.NextCursor)
		}),
	}
	p.flags(cmd.Flags(), 50, 500)
	cmd.Flags().Var(typ, "type", "only subscriptions of this type")
	cmd.Flags().Var(status, "status", "only subscriptions with this status")
	return cmd
}

func (a *cli) subsGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get ROOM SUBSCRIPTION",
		Short: "Show a subscription",
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: send(a, onSub(func(r req, room string, id uuid.UUID) (*client.GetSubscriptionResponse, error) {
			return r.c.GetSubscriptionWithResponse(r.ctx, room, id)
		}), showSubscription),
	}
}

// eventTypes shows a subscription's event type filters: type or
// type:1,2.
func eventTypes(fs []client.EventTypeFilter) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.EventType
		if f.Versions != nil && len(*f.Versions) > 0 {
			vs := make([]string, len(*f.Versions))
			for j, v := range *f.Versions {
				vs[j] = strconv.Itoa(v)
			}
			parts[i] += ":" + strings.Join(vs, ",")
		}
	}
	return strings.Join(parts, " ")
}

// target is where a subscription's messages go: its push URL, or its queue.
func target(s client.Subscription) string {
	if u, err := s.PushUrl.Get(); err == nil {
		return u
	}
	if d, err := s.Destination.Get(); err == nil {
		return d
	}
	return "-"
}

// subscriptionTable shows one subscription, field by field.
func subscriptionTable(t *table, s *client.Subscription) {
	t.row("ID", s.Id)
	t.row("ROOM ID", s.RoomId)
	t.row("TYPE", s.Type)
	t.row("STATUS", s.Status)
	t.row("EVENT TYPES", eventTypes(s.EventTypes))
	if s.Type == "PUSH" {
		t.row("PUSH URL", orNull(s.PushUrl, str))
		t.row("PUSH AUTH", orNull(s.PushAuth, func(p client.PushAuth) string {
			raw, _ := json.Marshal(p)
			return string(raw)
		}))
	} else {
		t.row("DESTINATION", orNull(s.Destination, str))
		t.row("ACK DEADLINE", ms(s.AckDeadline))
	}
	t.row("OWNER", orNull(s.Owner, str))
	t.row("ATTRIBUTE FILTER", orNull(s.AttributeFilter, func(f client.AttributeFilter) string {
		raw, _ := json.Marshal(f)
		return string(raw)
	}))
	var overrides []string
	if v, err := s.DeliveryDelay.Get(); err == nil {
		overrides = append(overrides, "deliveryDelay="+ms(v))
	}
	if v, err := s.DeliveryDelayMultiplier.Get(); err == nil {
		overrides = append(overrides, fmt.Sprintf("deliveryDelayMultiplier=%v", v))
	}
	if v, err := s.DeliveryAttempts.Get(); err == nil {
		overrides = append(overrides, fmt.Sprintf("deliveryAttempts=%d", v))
	}
	if v, err := s.MaxDeliveryDelay.Get(); err == nil {
		overrides = append(overrides, "maxDeliveryDelay="+ms(v))
	}
	if v, err := s.DeliveryJitter.Get(); err == nil {
		overrides = append(overrides, fmt.Sprintf("deliveryJitter=%v", v))
	}
	if s.RetryPolicy.IsSpecified() && !s.RetryPolicy.IsNull() {
		overrides = append(overrides, "retryPolicy")
	}
	t.row("DELIVERY OVERRIDES", strings.Join(overrides, " "))
	if s.Type == "PUSH" {
		t.row("MAX DELIVERY RATE", orNull(s.MaxDeliveryRate, func(v float64) string { return fmt.Sprintf("%v/s", v) }))
		t.row("CIRCUIT", orNull(s.Circuit, circuit))
	}
	if by, err := s.DecidedBy.Get(); err == nil {
		t.row("DECIDED BY", by)
		t.row("DECIDED AT", orNull(s.DecidedAt, func(v time.Time) string { return cell(v) }))
		t.row("REJECTION REASON", orNull(s.RejectionReason, str))
	}
	if s.SigningSecret != nil {
		t.row("SIGNING SECRET", *s.SigningSecret)
	}
	t.row("CREATED", s.CreatedAt)
	t.row("UPDATED", s.UpdatedAt)
}

// circuit shows a PUSH subscription's circuit.
func circuit(c client.Circuit) string {
	s := string(c.State)
	if v, err := c.OpenedAt.Get(); err == nil {
		s += ", opened " + cell(v)
	}
	if v, err := c.NextProbeAt.Get(); err == nil {
		s += ", next probe " + cell(v)
	}
	if v, err := c.LastError.Get(); err == nil && v != "" {
		s += ", last error " + strconv.Quote(v)
	}
	return s
}

// subFlags are the settings create and update take.
type subFlags struct {
	typ, status                      *choice
	pushURL, owner, filter, bodyFile string
	eventTypes, reset                []string
	delay, maxDelay, ackDeadline     time.Duration
	multiplier, jitter, rate         float64
	attempts                         int32
	paused                           bool
}

func (s *subFlags) flags(f *pflag.FlagSet, update bool) {
	f.StringVar(&s.pushURL, "push-url", "", "PUSH: the URL each message is POSTed to")
	f.StringArrayVar(&s.eventTypes, "event-type", nil, "an event type to receive, TYPE or TYPE:1,2 for only those versions; repeat for more")
	f.StringVar(&s.filter, "attribute-filter", "", `an attribute filter, JSON, such as {"region":["eu"]}`)
	f.StringVar(&s.owner, "owner", "", "the subscriber key's subject that may use the subscription")
	f.DurationVar(&s.ackDeadline, "ack-deadline", 0, "PULL: how long a pulled message waits for its ack (1s to 10m; default 30s)")
	f.DurationVar(&s.delay, "delivery-delay", 0, "override the room's first retry delay")
	f.Float64Var(&s.multiplier, "delivery-delay-multiplier", 0, "override the room's retry delay multiplier")
	f.Int32Var(&s.attempts, "delivery-attempts", 0, "override the room's most delivery attempts")
	f.DurationVar(&s.maxDelay, "max-delivery-delay", 0, "override the room's cap on a retry delay")
	f.Float64Var(&s.jitter, "delivery-jitter", 0, "override the room's retry jitter (0 to 1)")
	f.Float64Var(&s.rate, "max-delivery-rate", 0, "PUSH: the most requests per second its endpoint gets")
	f.StringVar(&s.bodyFile, "body-file", "", "a JSON file (- for standard input) with the request body (for the fields without a flag, such as pushAuth, retryPolicy and circuitBreaker); flags given override it")
	if update {
		s.status = newChoice("", "ACTIVE", "PAUSED", "TERMINATED")
		f.Var(s.status, "status", "ACTIVE, PAUSED, or TERMINATED (final)")
		f.StringSliceVar(&s.reset, "reset", nil, "fields to set to null (the room's value, or none): "+strings.Join(resettable, ", "))
	} else {
		s.typ = newChoice("", "PUSH", "PULL")
		f.Var(s.typ, "type", "PUSH or PULL (default: PUSH with --push-url, else PULL)")
		f.BoolVar(&s.paused, "paused", false, "create it PAUSED")
	}
}

// resettable are the fields --reset sets to null.
var resettable = []string{"push-auth", "attribute-filter", "owner", "ack-deadline", "delivery-delay", "delivery-delay-multiplier",
	"delivery-attempts", "max-delivery-delay", "delivery-jitter", "max-delivery-rate", "retry-policy", "circuit-breaker"}

// subFields are the fields of a create or update body the flags set.
type subFields struct {
	pushURL, owner           *nullable.Nullable[string]
	filter                   *nullable.Nullable[client.AttributeFilter]
	delay, maxDelay          *nullable.Nullable[int64]
	multiplier, jitter, rate *nullable.Nullable[float64]
	attempts                 *nullable.Nullable[int32]
	pushAuth                 *nullable.Nullable[client.PushAuthInput]
	retryPolicy              *nullable.Nullable[client.SubscriptionRetryPolicy]
	circuitBreaker           *nullable.Nullable[client.SubscriptionCircuitBreaker]
	ackDeadline              func(ms int64)
	resetAckDeadline         func() error
}

// apply sets the fields the flags set gives.
func (s *subFlags) apply(set func(string) bool, b subFields) error {
	if set("push-url") {
		b.pushURL.Set(s.pushURL)
	}
	if set("owner") {
		b.owner.Set(s.owner)
	}
	if set("attribute-filter") {
		var f client.AttributeFilter
		if err := json.Unmarshal([]byte(s.filter), &f); err != nil {
			return usagef("--attribute-filter is not a JSON object of attribute conditions: %v", err)
		}
		b.filter.Set(f)
	}
	if set("ack-deadline") {
		b.ackDeadline(s.ackDeadline.Milliseconds())
	}
	if set("delivery-delay") {
		b.delay.Set(s.delay.Milliseconds())
	}
	if set("delivery-delay-multiplier") {
		b.multiplier.Set(s.multiplier)
	}
	if set("delivery-attempts") {
		b.attempts.Set(s.attempts)
	}
	if set("max-delivery-delay") {
		b.maxDelay.Set(s.maxDelay.Milliseconds())
	}
	if set("delivery-jitter") {
		b.jitter.Set(s.jitter)
	}
	if set("max-delivery-rate") {
		b.rate.Set(s.rate)
	}
	for _, field := range s.reset {
		switch strings.TrimSpace(field) {
		case "push-auth":
			b.pushAuth.SetNull()
		case "attribute-filter":
			b.filter.SetNull()
		case "owner":
			b.owner.SetNull()
		case "ack-deadline":
			if err := b.resetAckDeadline(); err != nil {
				return err
			}
		case "delivery-delay":
			b.delay.SetNull()
		case "delivery-delay-multiplier":
			b.multiplier.SetNull()
		case "delivery-attempts":
			b.attempts.SetNull()
		case "max-delivery-delay":
			b.maxDelay.SetNull()
		case "delivery-jitter":
			b.jitter.SetNull()
		case "max-delivery-rate":
			b.rate.SetNull()
		case "retry-policy":
			b.retryPolicy.SetNull()
		case "circuit-breaker":
			b.circuitBreaker.SetNull()
		default:
			return usagef("--reset: no field %q (%s)", field, strings.Join(resettable, ", "))
		}
	}
	return nil
}

// eventTypeFilters reads --event-type values: TYPE or TYPE:1,2.
func eventTypeFilters(values []string) ([]client.EventTypeFilterInput, error) {
	out := make([]client.EventTypeFilterInput, 0, len(values))
	for _, v := range values {
		name, versions, hasVersions := strings.Cut(v, ":")
		f := client.EventTypeFilterInput{EventType: strings.TrimSpace(name)}
		if f.EventType == "" {
			return nil, usagef("--event-type %q names no event type", v)
		}
		if hasVersions {
			var vs []int
			for part := range strings.SplitSeq(versions, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(part))
				if err != nil {
					return nil, usagef("--event-type %q: versions must be numbers, as in %s:1,2", v, f.EventType)
				}
				vs = append(vs, n)
			}
			f.Versions = &vs
		}
		out = append(out, f)
	}
	return out, nil
}

func (a *cli) subsCreate() *cobra.Command {
	var s subFlags
	cmd := &cobra.Command{
		Use:   "create ROOM",
		Short: "Create a PUSH or PULL subscription",
		Long: `Create a subscription to some of a room's event types. A PUSH subscription's answer
shows its signing secret, the only time it is shown (see roomctl verify).`,
		Example: `  roomctl subscriptions create orders --push-url https://hooks.example.com/orders --event-type order.created:1
  roomctl subscriptions create orders --type PULL --event-type order.created --ack-deadline 1m`,
		Args: exactArgs("ROOM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.SubscriptionCreate
			if err := a.bodyFile(s.bodyFile, &body); err != nil {
				return err
			}
			set := cmd.Flags().Changed
			switch {
			case set("type"):
				body.Type = client.SubscriptionType(s.typ.value)
			case body.Type != "":
			case set("push-url"):
				body.Type = "PUSH"
			default:
				body.Type = "PULL"
			}
			if set("event-type") {
				filters, err := eventTypeFilters(s.eventTypes)
				if err != nil {
					return err
				}
				body.EventTypes = filters
			}
			if len(body.EventTypes) == 0 {
				return usagef("name the event types to receive with --event-type (or eventTypes in --body-file)")
			}
			if s.paused {
				v := client.SubscriptionCreateStatus("PAUSED")
				body.Status = &v
			}
			err := s.apply(set, subFields{pushURL: &body.PushUrl, owner: &body.Owner, filter: &body.AttributeFilter,
				delay: &body.DeliveryDelay, maxDelay: &body.MaxDeliveryDelay, multiplier: &body.DeliveryDelayMultiplier,
				jitter: &body.DeliveryJitter, rate: &body.MaxDeliveryRate, attempts: &body.DeliveryAttempts,
				pushAuth: &body.PushAuth, retryPolicy: &body.RetryPolicy, circuitBreaker: &body.CircuitBreaker,
				ackDeadline: func(v int64) { body.AckDeadline = &v }})
			if err != nil {
				return err
			}
			return send(a, func(q req) (*client.CreateSubscriptionResponse, error) {
				return q.c.CreateSubscriptionWithResponse(q.ctx, args[0], body)
			}, func(t *table, resp *client.CreateSubscriptionResponse) {
				subscriptionTable(t, resp.JSON201)
				if resp.JSON201.SigningSecret != nil {
					t.notes = append(t.notes, "The signing secret is shown only now: keep it to verify the pushes (roomctl verify).")
				}
			})(cmd, args)
		},
	}
	s.flags(cmd.Flags(), false)
	return cmd
}

func (a *cli) subsUpdate() *cobra.Command {
	var s subFlags
	cmd := &cobra.Command{
		Use:     "update ROOM SUBSCRIPTION",
		Short:   "Change a subscription (only the fields given)",
		Example: "  roomctl subscriptions update orders 0190… --event-type order.created --event-type order.paid --reset delivery-attempts",
		Args:    exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.SubscriptionPatch
			if err := a.bodyFile(s.bodyFile, &body); err != nil {
				return err
			}
			set := cmd.Flags().Changed
			if set("event-type") {
				filters, err := eventTypeFilters(s.eventTypes)
				if err != nil {
					return err
				}
				body.EventTypes = &filters
			}
			if set("status") {
				v := client.SubscriptionStatusChange(s.status.value)
				body.Status = &v
			}
			err := s.apply(set, subFields{pushURL: &body.PushUrl, owner: &body.Owner, filter: &body.AttributeFilter,
				delay: &body.DeliveryDelay, maxDelay: &body.MaxDeliveryDelay, multiplier: &body.DeliveryDelayMultiplier,
				jitter: &body.DeliveryJitter, rate: &body.MaxDeliveryRate, attempts: &body.DeliveryAttempts,
				pushAuth: &body.PushAuth, retryPolicy: &body.RetryPolicy, circuitBreaker: &body.CircuitBreaker,
				ackDeadline:      func(v int64) { body.AckDeadline.Set(v) },
				resetAckDeadline: func() error { body.AckDeadline.SetNull(); return nil }})
			if err != nil {
				return err
			}
			return a.patchSubscription(cmd, args, body)
		},
	}
	s.flags(cmd.Flags(), true)
	return cmd
}

// patchSubscription sends body as a PATCH of the subscription and shows
// the answer.
func (a *cli) patchSubscription(cmd *cobra.Command, args []string, body client.SubscriptionPatch) error {
	return send(a, onSub(func(r req, room string, id uuid.UUID) (*client.UpdateSubscriptionResponse, error) {
		return r.c.UpdateSubscriptionWithResponse(r.ctx, room, id, body)
	}), showSubscription)(cmd, args)
}

func (a *cli) subsStatus(name, status, short string) *cobra.Command {
	return &cobra.Command{
		Use:   name + " ROOM SUBSCRIPTION",
		Short: short,
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := client.SubscriptionStatusChange(status)
			return a.patchSubscription(cmd, args, client.SubscriptionPatch{Status: &v})
		},
	}
}

func (a *cli) subsDelete() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ROOM SUBSCRIPTION",
		Short: "Delete a subscription, its dead letters and (PULL) its queue",
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(a, onSub(func(r req, room string, id uuid.UUID) (*client.DeleteSubscriptionResponse, error) {
				return r.c.DeleteSubscriptionWithResponse(r.ctx, room, id)
			}), done[*client.DeleteSubscriptionResponse]("deleted subscription "+args[1]))(cmd, args)
		},
	}
}

func (a *cli) subsRotate() *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "rotate-secret ROOM SUBSCRIPTION",
		Short: "Give a PUSH subscription a new signing secret (shown only now)",
		Long: `Give a PUSH subscription a new signing secret and show it. The previous secret keeps
signing alongside it for the grace period (24h unless --grace-period), so receivers
can switch without rejecting a request.`,
		Args: exactArgs("ROOM", "SUBSCRIPTION"),
	}
	cmd.RunE = send(a, onSub(func(r req, room string, id uuid.UUID) (*client.RotateSubscriptionSecretResponse, error) {
		var body client.SecretRotation
		if cmd.Flags().Changed("grace-period") {
			v := grace.Milliseconds()
			body.GracePeriod = &v
		}
		return r.c.RotateSubscriptionSecretWithResponse(r.ctx, room, id, body)
	}), func(t *table, resp *client.RotateSubscriptionSecretResponse) {
		// The rotated subscription is a subscription with its secret.
		var s client.Subscription
		if err := json.Unmarshal(resp.Body, &s); err != nil {
			t.err = err
			return
		}
		subscriptionTable(t, &s)
		t.notes = append(t.notes, "The new signing secret is shown only now: keep it to verify the pushes (roomctl verify).")
	})
	cmd.Flags().DurationVar(&grace, "grace-period", 0, "how long the previous secret keeps signing too (0 to 168h; default 24h)")
	return cmd
}

func (a *cli) subsApprove() *cobra.Command {
	return &cobra.Command{
		Use:   "approve ROOM SUBSCRIPTION",
		Short: "Approve a PENDING subscription: it becomes ACTIVE",
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: send(a, onSub(func(r req, room string, id uuid.UUID) (*client.ApproveSubscriptionResponse, error) {
			return r.c.ApproveSubscriptionWithResponse(r.ctx, room, id)
		}), showSubscription),
	}
}

func (a *cli) subsReject() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reject ROOM SUBSCRIPTION --reason TEXT",
		Short: "Reject a PENDING subscription (final), saying why",
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: send(a, onSub(func(r req, room string, id uuid.UUID) (*client.RejectSubscriptionResponse, error) {
			return r.c.RejectSubscriptionWithResponse(r.ctx, room, id, client.SubscriptionRejection{Reason: reason})
		}), showSubscription),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the subscription's owner to read (required)")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func (a *cli) subsTest() *cobra.Command {
	return &cobra.Command{
		Use:   "test ROOM SUBSCRIPTION",
		Short: "Send a test event to a PUSH subscription's endpoint and show what came back",
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: send(a, onSub(func(r req, room string, id uuid.UUID) (*client.TestSubscriptionResponse, error) {
			return r.c.TestSubscriptionWithResponse(r.ctx, room, id)
		}), func(t *table, resp *client.TestSubscriptionResponse) {
			res := resp.JSON200
			t.row("EVENT ID", res.EventId)
			t.row("SENT", res.SentAt)
			t.row("OUTCOME", res.Outcome)
			t.row("STATUS CODE", orNull(res.StatusCode, str))
			t.row("LATENCY", ms(res.Latency))
			t.row("ERROR", orNull(res.Error, str))
			t.row("RESPONSE BODY", truncate(res.ResponseBody, 200))
		}),
	}
}

func (a *cli) subsCircuitReset() *cobra.Command {
	return &cobra.Command{
		Use:   "circuit-reset ROOM SUBSCRIPTION",
		Short: "Close a PUSH subscription's circuit at once (once its endpoint is fixed)",
		Args:  exactArgs("ROOM", "SUBSCRIPTION"),
		RunE: send(a, onSub(func(r req, room string, id uuid.UUID) (*client.ResetSubscriptionCircuitResponse, error) {
			return r.c.ResetSubscriptionCircuitWithResponse(r.ctx, room, id)
		}), showSubscription),
	}
}
