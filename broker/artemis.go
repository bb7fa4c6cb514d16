package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/google/uuid"
)

// artemis is the dialect of Apache ActiveMQ Artemis (see ARCHITECTURE.md,
// "Facts about the brokers"): destinations are fully qualified queue names,
// queues are made and destroyed over the management address, a consumer's
// window counts bytes, and Prepare reads the address settings.
type artemis struct {
	b *stompBroker // whose connections management calls use

	// ensureBeforeSend makes Send create each destination before its first
	// send (see beforeSend): from the start, until Prepare finds that the
	// broker creates queues on a SEND. ensured holds the destinations created
	// since (by FQQN).
	ensureBeforeSend atomic.Bool
	ensuredMu        sync.Mutex
	ensured          map[string]struct{}
	ensuring         map[string]chan struct{} // creations under way, closed when done
	// replyQueueMade, when set (by tests), hears the name of every
	// management reply queue.
	replyQueueMade func(name string)
}

// newArtemis refuses heartbeat=0: without heart-beats Artemis applies its
// connection TTL (60 s by default) and closes a connection idle that long, so
// a subscription to a quiet queue would drop every minute.
func newArtemis(b *stompBroker) (dialect, error) {
	if b.cfg.heartbeat == 0 {
		return nil, errors.New("option heartbeat: 0 is refused with dialect=artemis, which closes a connection idle for its connection TTL (60s); use a duration such as 10s")
	}
	a := &artemis{b: b, ensured: make(map[string]struct{}), ensuring: make(map[string]chan struct{})}
	a.ensureBeforeSend.Store(true)
	return a, nil
}

// destination is the fully qualified queue name, which SEND and SUBSCRIBE
// accept.
func (*artemis) destination(d Destination) string { return d.FQQN() }

// unsendable lets Artemis drop a message that expires before it is due: its
// expires is absolute and a delay does not move it.
func (*artemis) unsendable(Message, time.Time) error { return nil }

// sendHeaders makes every destination ANYCAST: Artemis auto-creates addresses
// with its default routing type (MULTICAST unless configured otherwise), and
// these queues are point-to-point.
func (*artemis) sendHeaders(_ Message, headers [][2]string) [][2]string {
	return append(headers, [2]string{"destination-type", "ANYCAST"})
}

func (a *artemis) subscribeOptions(prefetch int) []func(*frame.Frame) error {
	return []func(*frame.Frame) error{
		stomp.SubscribeOpt.Header("subscription-type", "ANYCAST"),
		stomp.SubscribeOpt.Header("consumer-window-size", strconv.Itoa(consumerWindow(prefetch, a.b.cfg.windowPerMessage))),
	}
}

// consumerWindow is Artemis' consumer-window-size for a prefetch of n messages.
// Artemis counts the bytes of the MESSAGE frames it sends and sends while any
// are left, so n messages are budgeted windowPerMessage bytes each (see
// defaultWindowPerMessage) and the consumer holds about n messages of that
// size, one more at most. n = 1 maps to 0, which Artemis reads as "one
// unacknowledged message at a time". Artemis parses the header as an int32.
func consumerWindow(prefetch, windowPerMessage int) int {
	if prefetch <= 1 {
		return 0
	}
	return int(min(int64(prefetch)*int64(windowPerMessage), math.MaxInt32))
}

// full: Artemis sends while any of its window is left, and reads a window of
// 0 as one byte.
func (a *artemis) full(w *window, prefetch int) bool {
	return w.bytes.Load() >= int64(max(consumerWindow(prefetch, a.b.cfg.windowPerMessage), 1))
}

// addressFull: with the FAIL address-full policy the ERROR frame's message
// header is a generic "AMQ339011: Error sending message ...", and its body
// holds the cause, AMQ229102: Address "..." is full.
func (*artemis) addressFull(refusal string) bool { return strings.Contains(refusal, "AMQ229102") }

// ensureQueue pre-creates dest: Artemis deletes an auto-created queue once it
// is empty and unconsumed.
func (a *artemis) ensureQueue(ctx context.Context, dest Destination) error {
	if err := a.createQueue(ctx, dest); err != nil {
		return err
	}
	a.ensuredMu.Lock()
	a.ensured[dest.FQQN()] = struct{}{}
	a.ensuredMu.Unlock()
	return nil
}

// deleteQueue destroys dest; its consumers are disconnected first.
func (a *artemis) deleteQueue(ctx context.Context, dest Destination) error {
	a.ensuredMu.Lock()
	delete(a.ensured, dest.FQQN())
	a.ensuredMu.Unlock()
	return a.destroyQueue(ctx, dest)
}

// beforeSend creates dest before this process first sends to it, unless
// Prepare found that Artemis creates missing queues on a SEND: where it does
// not, it answers the SEND with a RECEIPT and drops the message.
// Concurrent first sends to one destination share one creation.
func (a *artemis) beforeSend(ctx context.Context, dest Destination) error {
	if !a.ensureBeforeSend.Load() {
		return nil
	}
	key := dest.FQQN()
	for {
		a.ensuredMu.Lock()
		if _, done := a.ensured[key]; done {
			a.ensuredMu.Unlock()
			return nil
		}
		if wait, busy := a.ensuring[key]; busy {
			a.ensuredMu.Unlock()
			select {
			case <-wait:
				continue // done, or failed: then this send tries itself
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done := make(chan struct{})
		a.ensuring[key] = done
		a.ensuredMu.Unlock()
		err := a.createQueue(ctx, dest)
		a.ensuredMu.Lock()
		delete(a.ensuring, key)
		if err == nil {
			a.ensured[key] = struct{}{}
		}
		a.ensuredMu.Unlock()
		close(done)
		return err
	}
}

// Artemis management over STOMP: a SEND to the management address with
// _AMQ_ResourceName and _AMQ_OperationName headers and the operation's
// parameters as a JSON array in a text body invokes that operation on the
// resource; the broker answers on the reply-to address with
// _AMQ_OperationSucceeded and the result (or the exception message) as a JSON
// array. Artemis treats a STOMP frame as text only when it has no
// content-length, hence SendOpt.NoContentLength. The login needs the "manage"
// permission on the management address and may auto-create its reply queue.
const (
	mgmtHeaderResource  = "_AMQ_ResourceName"
	mgmtHeaderOperation = "_AMQ_OperationName"
	mgmtHeaderSucceeded = "_AMQ_OperationSucceeded"
	mgmtResourceBroker  = "broker" // ActiveMQServerControl
)

// Artemis error codes that mean the desired state already holds.
const (
	artemisQueueExists     = "AMQ229019" // queue already exists
	artemisQueueNotExisted = "AMQ229017" // queue does not exist
)

// artemisQueueConfig is the JSON QueueConfiguration that
// ActiveMQServerControl.createQueue(String queueConfiguration, boolean ignoreIfExists)
// takes (current Artemis 2.x; brokers without that overload answer "no operation").
// A durable, never auto-deleted ANYCAST queue:
// auto-created queues vanish once empty and unconsumed, which a PULL
// subscription's queue must survive.
type artemisQueueConfig struct {
	Name              string `json:"name"`
	Address           string `json:"address"`
	RoutingType       string `json:"routing-type"`
	Durable           bool   `json:"durable"`
	AutoDelete        bool   `json:"auto-delete"`
	AutoCreateAddress bool   `json:"auto-create-address"`
}

func (a *artemis) createQueue(ctx context.Context, dest Destination) error {
	qc, err := json.Marshal(artemisQueueConfig{
		Name:              dest.Queue,
		Address:           dest.Address,
		RoutingType:       "ANYCAST",
		Durable:           true,
		AutoDelete:        false,
		AutoCreateAddress: true,
	})
	if err != nil {
		return fmt.Errorf("broker: create queue %s: %w", dest, err)
	}
	_, err = a.manage(ctx, "createQueue", string(qc), true)
	if err != nil && !strings.Contains(err.Error(), artemisQueueExists) && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("broker: create queue %s: %w", dest, err)
	}
	// Queue names are broker-wide, and createQueue with ignoreIfExists says
	// nothing when the name belongs to another address; a SEND to dest would
	// then be dropped with a RECEIPT.
	addr, err := a.queueAddress(ctx, dest.Queue)
	switch {
	case err != nil:
		return fmt.Errorf("broker: create queue %s: %w", dest, err)
	case addr != dest.Address:
		return fmt.Errorf("%w: queue name %q belongs to address %q, not %q (Artemis queue names are broker-wide)",
			ErrMisconfigured, dest.Queue, addr, dest.Address)
	}
	return nil
}

// queueAddress returns the address of the queue named name.
func (a *artemis) queueAddress(ctx context.Context, name string) (string, error) {
	filter, _ := json.Marshal(map[string]string{"field": "name", "operation": "EQUALS", "value": name})
	raw, err := a.manage(ctx, "listQueues", string(filter), 1, 2)
	if err != nil {
		return "", err
	}
	var page struct {
		Data []struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(raw), &page); err != nil {
		return "", fmt.Errorf("listQueues: %w", err)
	}
	for _, q := range page.Data {
		if q.Name == name {
			return q.Address, nil
		}
	}
	return "", fmt.Errorf("queue %s not found after createQueue", name)
}

func (a *artemis) destroyQueue(ctx context.Context, dest Destination) error {
	// destroyQueue(String name, boolean removeConsumers, boolean autoDeleteAddress):
	// queue names are unique per broker; the address goes with its last queue.
	_, err := a.manage(ctx, "destroyQueue", dest.Queue, true, true)
	if err != nil && !strings.Contains(err.Error(), artemisQueueNotExisted) && !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("broker: delete queue %s: %w", dest, err)
	}
	return nil
}

// errManagement wraps a failure reported by the broker for a management operation.
var errManagement = errors.New("broker: management operation failed")

// mgmtReplyPrefix names the reply queue of each management call. Each call
// creates its queue (auto-create may be off) and destroys it when done
// (auto-delete may be off, as for "#" in our broker.properties); the queue is
// not durable, so one a crash leaves behind goes with the broker's restart.
const mgmtReplyPrefix = "messaging-api.management.reply."

// manage invokes operation on the broker resource over a short-lived
// connection of its own, so that an ERROR (for example a missing "manage"
// permission) cannot take a sender or a subscription down with it. It returns
// the operation's result as text (see managementResult).
func (a *artemis) manage(ctx context.Context, operation string, params ...any) (string, error) {
	if params == nil {
		params = []any{} // "null" is not a parameter list
	}
	body, err := json.Marshal(params)
	if err != nil {
		return "", fmt.Errorf("broker: %s: %w", operation, err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.b.cfg.connectTimeout+a.b.cfg.receiptTimeout)
	defer cancel()
	c, err := a.b.dial(ctx, "management")
	if err != nil {
		return "", err
	}
	// Frames of one connection are handled in order: the reply queue is
	// created (a createQueue without reply-to; the receipt says it ran) and
	// subscribed to before the request is sent.
	replyTo := mgmtReplyPrefix + uuid.NewString()
	if a.replyQueueMade != nil {
		a.replyQueueMade(replyTo)
	}
	qc, _ := json.Marshal(artemisQueueConfig{Name: replyTo, Address: replyTo, RoutingType: "ANYCAST", AutoCreateAddress: true})
	create, _ := json.Marshal([]any{string(qc), true})
	if err := c.send(a.b.cfg.managementAddress, "", create, a.b.cfg.receiptTimeout, a.mgmtOptions("createQueue")...); err != nil {
		c.close()
		return "", a.mgmtError(operation, err)
	}
	defer func() {
		// The caller's context may be done: the queue is destroyed anyway.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.b.cfg.receiptTimeout)
		defer cancel()
		a.dropReplyQueue(ctx, replyTo)
	}()
	sub, err := c.sc.Subscribe(replyTo, stomp.AckAuto, stomp.SubscribeOpt.Header("subscription-type", "ANYCAST"))
	if err != nil {
		c.close()
		return "", fmt.Errorf("broker: %s: subscribe to reply queue: %w", operation, err)
	}
	defer c.closeDraining(sub) // runs before the queue is destroyed

	correlationID := uuid.NewString()
	err = c.send(a.b.cfg.managementAddress, "", body, a.b.cfg.receiptTimeout, append(a.mgmtOptions(operation),
		func(f *frame.Frame) error {
			f.Header.Set(stomp.ReplyToHeader, replyTo)
			f.Header.Set(HeaderCorrelationID, correlationID)
			return nil
		})...)
	if err != nil {
		return "", a.mgmtError(operation, err)
	}

	timeout := time.NewTimer(a.b.cfg.receiptTimeout)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-sub.C:
			switch {
			case !ok:
				return "", fmt.Errorf("broker: %s: connection lost before the reply", operation)
			case m.Err != nil:
				return "", fmt.Errorf("broker: %s: %w", operation, m.Err)
			case m.Header.Get(HeaderCorrelationID) != correlationID:
				continue // not ours; cannot happen on a fresh reply queue
			}
			result := managementResult(m.Body)
			if m.Header.Get(mgmtHeaderSucceeded) != "true" {
				return "", fmt.Errorf("%w: %s: %s", errManagement, operation, result)
			}
			return result, nil
		case <-timeout.C:
			return "", fmt.Errorf("broker: %s: no reply within %s", operation, a.b.cfg.receiptTimeout)
		case <-ctx.Done():
			return "", fmt.Errorf("broker: %s: %w", operation, ctx.Err())
		}
	}
}

// dropReplyQueue destroys a management call's reply queue once the call's
// connection is closed (go-stomp's Unsubscribe can wait out its 30 s receipt
// timeout on a missed wake-up, and destroying a queue under a live STOMP
// consumer gets that connection an ERROR). It goes on a sender connection,
// without a reply-to (a reply would create the queue again); the receipt says
// the broker ran it. A failure leaves one empty queue behind and is logged.
func (a *artemis) dropReplyQueue(ctx context.Context, queue string) {
	body, _ := json.Marshal([]any{queue, true, true})
	if err := a.b.sendOnce(ctx, a.b.cfg.managementAddress, body, a.mgmtOptions("destroyQueue")); err != nil {
		a.b.log.Warn("broker: management reply queue left behind", "queue", queue, "err", err)
	}
}

// mgmtOptions are the headers of a SEND invoking operation on the broker
// resource, with a receipt. Artemis reads a STOMP body as text only without
// content-length.
func (*artemis) mgmtOptions(operation string) []func(*frame.Frame) error {
	return []func(*frame.Frame) error{
		stomp.SendOpt.Receipt,
		stomp.SendOpt.NoContentLength,
		func(f *frame.Frame) error {
			f.Header.Set(mgmtHeaderResource, mgmtResourceBroker)
			f.Header.Set(mgmtHeaderOperation, operation)
			return nil
		},
	}
}

// mgmtError wraps the failure of a management SEND. An ERROR frame answering
// it means the login may not use the management address: a setting, so it
// matches ErrMisconfigured.
func (a *artemis) mgmtError(operation string, err error) error {
	if isRefusal(err) {
		return fmt.Errorf("%w: the broker refused management operation %s on %s (the login needs the manage permission there): %w",
			ErrMisconfigured, operation, a.b.cfg.managementAddress, err)
	}
	return fmt.Errorf("broker: %s: %w", operation, err)
}

// managementResult extracts the text of a management reply: a JSON array whose
// first element is the result or the exception message. Anything else is
// returned as is, trimmed.
func managementResult(body []byte) string {
	if i := bytes.IndexByte(body, '['); i > 0 {
		body = body[i:] // tolerate a binary length prefix before the text
	}
	var arr []any
	if err := json.Unmarshal(bytes.TrimRight(body, "\x00 \r\n"), &arr); err == nil && len(arr) > 0 {
		if s, ok := arr[0].(string); ok {
			return s
		}
		if out, err := json.Marshal(arr[0]); err == nil {
			return string(out)
		}
	}
	return strings.TrimSpace(string(body))
}

// artemisAddressSettings are the fields of AddressSettings.toJSON that the
// delivery contract depends on; a field the broker leaves out reads as its
// Artemis default.
type artemisAddressSettings struct {
	MaxDeliveryAttempts *int  `json:"maxDeliveryAttempts"`
	AutoCreateQueues    *bool `json:"autoCreateQueues"`
	AutoCreateAddresses *bool `json:"autoCreateAddresses"`
}

// artemisStatus is the part of ActiveMQServerControl.getStatus that says
// which broker properties were not applied: Artemis ignores a misspelt key
// at startup and reports it only here.
type artemisStatus struct {
	Configuration struct {
		Properties map[string]struct {
			Errors []struct {
				Value  string `json:"value"`
				Reason string `json:"reason"`
			} `json:"errors"`
		} `json:"properties"`
	} `json:"configuration"`
}

// unappliedProperties lists, from the broker status JSON, the broker
// properties Artemis did not apply, sorted.
func unappliedProperties(status string) []string {
	var st artemisStatus
	if err := json.Unmarshal([]byte(status), &st); err != nil {
		return nil
	}
	var out []string
	for file, p := range st.Configuration.Properties {
		for _, e := range p.Errors {
			out = append(out, fmt.Sprintf("%s: %s was not applied: %s", file, e.Value, e.Reason))
		}
	}
	slices.Sort(out)
	return out
}

// prepare reads the address settings that match each address and the
// broker's status:
//   - max-delivery-attempts other than -1 is an error: Artemis counts a
//     connection lost with unacked deliveries as an attempt, and at the limit
//     moves the message to its own dead-letter address, outside the service's
//     dead letters and retries.
//   - auto-create-queues off is worked around: every destination is created
//     (EnsureQueue) before this process first sends to it, because Artemis
//     answers a SEND to a missing queue of an existing address with a
//     RECEIPT and drops the message.
//   - broker properties that were not applied are warnings.
func (a *artemis) prepare(ctx context.Context, addresses []string) ([]string, error) {
	var warnings []string
	var problems []string
	ensure := false
	for _, addr := range addresses {
		raw, err := a.manage(ctx, "getAddressSettingsAsJSON", addr)
		if err != nil {
			return nil, fmt.Errorf("broker: read the address settings of %s: %w", addr, err)
		}
		var st artemisAddressSettings
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, fmt.Errorf("broker: address settings of %s: %w", addr, err)
		}
		if st.MaxDeliveryAttempts == nil || *st.MaxDeliveryAttempts != -1 {
			n := "10 (the default)"
			if st.MaxDeliveryAttempts != nil {
				n = strconv.Itoa(*st.MaxDeliveryAttempts)
			}
			problems = append(problems, fmt.Sprintf("max-delivery-attempts is %s for address %q; the service needs -1 "+
				"(broker.properties: addressSettings.\"#\".maxDeliveryAttempts=-1): otherwise Artemis moves a message "+
				"whose consumer's connection dropped that often to its own dead-letter address", n, addr))
		}
		if st.AutoCreateQueues != nil && !*st.AutoCreateQueues {
			ensure = true
			warnings = append(warnings, fmt.Sprintf("auto-create-queues is off for address %q: the service creates each queue "+
				"before its first send; a queue deleted by hand afterwards drops what is sent to it", addr))
		}
		if st.AutoCreateAddresses != nil && !*st.AutoCreateAddresses {
			warnings = append(warnings, fmt.Sprintf("auto-create-addresses is off for address %q: the service creates "+
				"addresses with their queues", addr))
		}
	}
	raw, err := a.manage(ctx, "getStatus")
	if err != nil {
		return nil, fmt.Errorf("broker: read the broker status: %w", err)
	}
	warnings = append(warnings, unappliedProperties(raw)...)
	a.ensureBeforeSend.Store(ensure)
	if len(problems) > 0 {
		return warnings, fmt.Errorf("%w: %s", ErrMisconfigured, strings.Join(problems, "; "))
	}
	return warnings, nil
}
