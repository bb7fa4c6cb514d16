package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/google/uuid"
)

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

func (b *stompBroker) artemisCreateQueue(ctx context.Context, dest Destination) error {
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
	_, err = b.artemisManage(ctx, "createQueue", string(qc), true)
	if err != nil && !strings.Contains(err.Error(), artemisQueueExists) && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("broker: create queue %s: %w", dest, err)
	}
	// Queue names are broker-wide, and createQueue with ignoreIfExists says
	// nothing when the name belongs to another address; a SEND to dest would
	// then be dropped with a RECEIPT.
	addr, err := b.artemisQueueAddress(ctx, dest.Queue)
	switch {
	case err != nil:
		return fmt.Errorf("broker: create queue %s: %w", dest, err)
	case addr != dest.Address:
		return fmt.Errorf("%w: queue name %q belongs to address %q, not %q (Artemis queue names are broker-wide)",
			ErrMisconfigured, dest.Queue, addr, dest.Address)
	}
	return nil
}

// artemisQueueAddress returns the address of the queue named name.
func (b *stompBroker) artemisQueueAddress(ctx context.Context, name string) (string, error) {
	filter, _ := json.Marshal(map[string]string{"field": "name", "operation": "EQUALS", "value": name})
	raw, err := b.artemisManage(ctx, "listQueues", string(filter), 1, 2)
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

func (b *stompBroker) artemisDestroyQueue(ctx context.Context, dest Destination) error {
	// destroyQueue(String name, boolean removeConsumers, boolean autoDeleteAddress):
	// queue names are unique per broker; the address goes with its last queue.
	_, err := b.artemisManage(ctx, "destroyQueue", dest.Queue, true, true)
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

// artemisManage invokes operation on the broker resource over a short-lived
// connection of its own, so that an ERROR (for example a missing "manage"
// permission) cannot take a sender or a subscription down with it. It returns
// the operation's result as text (see managementResult).
func (b *stompBroker) artemisManage(ctx context.Context, operation string, params ...any) (string, error) {
	if params == nil {
		params = []any{} // "null" is not a parameter list
	}
	body, err := json.Marshal(params)
	if err != nil {
		return "", fmt.Errorf("broker: %s: %w", operation, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.connectTimeout+b.cfg.receiptTimeout)
	defer cancel()
	c, err := b.dial(ctx, "management")
	if err != nil {
		return "", err
	}
	// Frames of one connection are handled in order: the reply queue is
	// created (a createQueue without reply-to; the receipt says it ran) and
	// subscribed to before the request is sent.
	replyTo := mgmtReplyPrefix + uuid.NewString()
	if b.replyQueueMade != nil {
		b.replyQueueMade(replyTo)
	}
	qc, _ := json.Marshal(artemisQueueConfig{Name: replyTo, Address: replyTo, RoutingType: "ANYCAST", AutoCreateAddress: true})
	create, _ := json.Marshal([]any{string(qc), true})
	if err := c.send(b.cfg.managementAddress, "", create, b.cfg.receiptTimeout, b.mgmtOptions("createQueue")...); err != nil {
		c.close()
		return "", b.mgmtError(operation, err)
	}
	defer func() {
		// The caller's context may be done: the queue is destroyed anyway.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.receiptTimeout)
		defer cancel()
		b.dropReplyQueue(ctx, replyTo)
	}()
	sub, err := c.sc.Subscribe(replyTo, stomp.AckAuto, stomp.SubscribeOpt.Header("subscription-type", "ANYCAST"))
	if err != nil {
		c.close()
		return "", fmt.Errorf("broker: %s: subscribe to reply queue: %w", operation, err)
	}
	defer c.closeDraining(sub) // runs before the queue is destroyed

	correlationID := uuid.NewString()
	err = c.send(b.cfg.managementAddress, "", body, b.cfg.receiptTimeout, append(b.mgmtOptions(operation),
		func(f *frame.Frame) error {
			f.Header.Set(stomp.ReplyToHeader, replyTo)
			f.Header.Set(HeaderCorrelationID, correlationID)
			return nil
		})...)
	if err != nil {
		return "", b.mgmtError(operation, err)
	}

	timeout := time.NewTimer(b.cfg.receiptTimeout)
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
			return "", fmt.Errorf("broker: %s: no reply within %s", operation, b.cfg.receiptTimeout)
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
func (b *stompBroker) dropReplyQueue(ctx context.Context, queue string) {
	body, _ := json.Marshal([]any{queue, true, true})
	if err := b.sendOnce(ctx, b.cfg.managementAddress, body, b.mgmtOptions("destroyQueue")); err != nil {
		b.log.Warn("broker: management reply queue left behind", "queue", queue, "err", err)
	}
}

// mgmtOptions are the headers of a SEND invoking operation on the broker
// resource, with a receipt. Artemis reads a STOMP body as text only without
// content-length.
func (b *stompBroker) mgmtOptions(operation string) []func(*frame.Frame) error {
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
func (b *stompBroker) mgmtError(operation string, err error) error {
	if isRefusal(err) {
		return fmt.Errorf("%w: the broker refused management operation %s on %s (the login needs the manage permission there): %w",
			ErrMisconfigured, operation, b.cfg.managementAddress, err)
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

// artemisPrepare reads the address settings that match each address and the
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
func (b *stompBroker) artemisPrepare(ctx context.Context, addresses []string) ([]string, error) {
	var warnings []string
	var problems []string
	ensure := false
	for _, addr := range addresses {
		raw, err := b.artemisManage(ctx, "getAddressSettingsAsJSON", addr)
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
	raw, err := b.artemisManage(ctx, "getStatus")
	if err != nil {
		return nil, fmt.Errorf("broker: read the broker status: %w", err)
	}
	warnings = append(warnings, unappliedProperties(raw)...)
	b.ensureBeforeSend.Store(ensure)
	if len(problems) > 0 {
		return warnings, fmt.Errorf("%w: %s", ErrMisconfigured, strings.Join(problems, "; "))
	}
	return warnings, nil
}
