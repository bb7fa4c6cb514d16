package publish

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
)

// maxViolations bounds how many schema violations one response lists.
const maxViolations = 50

// schemaCache holds compiled schemas. A version's schema never changes, but a
// version can be deleted and created again with the same number, so the key
// includes its creation time.
type schemaCache struct {
	mu sync.RWMutex
	m  map[schemaKey]*rooms.Schema
}

type schemaKey struct {
	eventTypeID uuid.UUID
	version     int
	createdAt   int64
}

func (c *schemaCache) get(ctx context.Context, v rooms.Version) (*rooms.Schema, error) {
	k := schemaKey{v.EventTypeID, v.Version, v.CreatedAt.UnixNano()}
	c.mu.RLock()
	s, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return s, nil
	}
	s, err := rooms.CompileSchema(ctx, v.Schema)
	var refused *rooms.PointerError
	if errors.As(err, &refused) {
		// Stored before the schema limits were set: the version can take
		// no payload, and the publisher must be told why.
		return nil, fmt.Errorf("event type version %d: its schema exceeds the schema limits (%s); create a new version: %w",
			v.Version, refused.Error(), api.ErrInvalidState)
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) > 10_000 {
		c.m = map[schemaKey]*rooms.Schema{}
	}
	c.m[k] = s
	c.mu.Unlock()
	return s, nil
}

var printer = message.NewPrinter(language.English)

// payloadCheck is a decoded payload to check against its schema, reported
// under field (e.g. "payload" or "messages[2].payload") with pointer the
// payload's JSON pointer in the request body (e.g. "/messages/2/payload").
type payloadCheck struct {
	schema         *rooms.Schema
	value          any
	cost           int64 // estimated, in ticks
	field, pointer string
}

// decodePayload decodes payload for checking against the schema, or reports
// why it cannot be checked and returns a zero payloadCheck.
func decodePayload(s *rooms.Schema, payload []byte, field, pointer string, probs *api.Problems) payloadCheck {
	inst, cost, err := s.DecodePayload(payload)
	var refused *rooms.PointerError
	if errors.As(err, &refused) {
		probs.AddPointer(field, pointer+refused.Pointer, refused.Message)
		return payloadCheck{}
	}
	if err != nil {
		probs.Add(field, "is not valid JSON")
		return payloadCheck{}
	}
	return payloadCheck{schema: s, value: inst, cost: cost, field: field, pointer: pointer}
}

// run checks the payload and reports each violation with the JSON pointer
// of the offending value in the request body.
func (c payloadCheck) run(probs *api.Problems) {
	field, pointer := c.field, c.pointer
	err := c.schema.Validate(c.value)
	if err == nil {
		return
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		probs.Add(field, err.Error())
		return
	}
	n := 0
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if n >= maxViolations {
			return
		}
		if len(e.Causes) == 0 {
			n++
			probs.AddPointer(field, pointer+jsonPointer(e.InstanceLocation), e.ErrorKind.LocalizedString(printer))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
}

func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}
