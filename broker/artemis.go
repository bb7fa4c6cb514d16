package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	err = b.artemisManage(ctx, "createQueue", string(qc), true)
	if err != nil && !strings.Contains(err.Error(), artemisQueueExists) && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("broker: create queue %s: %w", dest, err)
	}
	return nil
}

func (b *stompBroker) artemisDestroyQueue(ctx context.Context, dest Destination) error {
	// destroyQueue(String name, boolean removeConsumers, boolean autoDeleteAddress):
	// queue names are unique per broker; the address goes with its last queue.
	err := b.artemisManage(ctx, "destroyQueue", dest.Queue, true, true)
	if err != nil && !strings.Contains(err.Error(), artemisQueueNotExisted) && !strings.Contains(err.Error(), "does not exist") {
		return fmt.Errorf("broker: delete queue %s: %w", dest, err)
	}
	return nil
}

// errManagement wraps a failure reported by the broker for a management operation.
var errManagement = errors.New("broker: management operation failed")

// artemisManage invokes operation on the broker resource over a short-lived
// connection of its own, so that an ERROR (for example a missing "manage"
// permission) cannot take a sender or a subscription down with it.
func (b *stompBroker) artemisManage(ctx context.Context, operation string, params ...any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("broker: %s: %w", operation, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.connectTimeout+b.cfg.receiptTimeout)
	defer cancel()
	c, err := b.dial(ctx, "management")
	if err != nil {
		return err
	}
	// The reply queue is auto-created by the SUBSCRIBE and auto-deleted when this
	// connection goes. Frames of one connection are handled in order, so the queue
	// exists before the request is.
	replyTo := "broker.management.reply." + uuid.NewString()
	sub, err := c.sc.Subscribe(replyTo, stomp.AckAuto, stomp.SubscribeOpt.Header("subscription-type", "ANYCAST"))
	if err != nil {
		c.close()
		return fmt.Errorf("broker: %s: subscribe to reply queue: %w", operation, err)
	}
	defer c.closeDraining(sub)

	correlationID := uuid.NewString()
	err = c.send(b.cfg.managementAddress, "", body, b.cfg.receiptTimeout,
		stomp.SendOpt.Receipt,
		stomp.SendOpt.NoContentLength,
		func(f *frame.Frame) error {
			f.Header.Set(mgmtHeaderResource, mgmtResourceBroker)
			f.Header.Set(mgmtHeaderOperation, operation)
			f.Header.Set(stomp.ReplyToHeader, replyTo)
			f.Header.Set(HeaderCorrelationID, correlationID)
			return nil
		})
	if err != nil {
		return fmt.Errorf("broker: %s: %w", operation, err)
	}

	timeout := time.NewTimer(b.cfg.receiptTimeout)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-sub.C:
			switch {
			case !ok:
				return fmt.Errorf("broker: %s: connection lost before the reply", operation)
			case m.Err != nil:
				return fmt.Errorf("broker: %s: %w", operation, m.Err)
			case m.Header.Get(HeaderCorrelationID) != correlationID:
				continue // not ours; cannot happen on a fresh reply queue
			}
			result := managementResult(m.Body)
			if m.Header.Get(mgmtHeaderSucceeded) != "true" {
				return fmt.Errorf("%w: %s: %s", errManagement, operation, result)
			}
			return nil
		case <-timeout.C:
			return fmt.Errorf("broker: %s: no reply within %s", operation, b.cfg.receiptTimeout)
		case <-ctx.Done():
			return fmt.Errorf("broker: %s: %w", operation, ctx.Err())
		}
	}
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
