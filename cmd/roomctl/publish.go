package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/client"
)

// publishFlags are the flags of publish.
type publishFlags struct {
	eventType, data, dataFile, correlationID, idempotencyKey, jsonl string
	version, batchSize                                              int
	attributes                                                      []string
}

// Publishing retries a request that got no answer (or a 429) this many
// times more, with the same Idempotency-Key, so that no event is published
// twice.
const publishRetries = 3

// maxBatch is the most messages one batch request takes.
const maxBatch = 100

func (a *cli) publishCommand() *cobra.Command {
	var p publishFlags
	cmd := &cobra.Command{
		Use:   "publish ROOM",
		Short: "Publish one event from flags, or many from JSON lines",
		Long: `Publish one event: its type (--type), optionally its version (--version, default the
newest), and its payload as JSON, inline (--data) or in a file (--data-file, - for
standard input).

Or publish many (--jsonl FILE, - for standard input): one event per line, sent in
batches (--batch-size, up to 100) through the batch route. Each line is a message as
the API takes it ({"eventType": ..., "payload": ..., "eventTypeVersion": ...,
"correlationId": ..., "attributes": {...}}), or, with --type, the payload alone. Each
line's result is printed (with -o json one JSON object per line: {"line": N,
"published": {...}} or {"line": N, "error": {...}}). A batch the API refuses because
of some of its messages is sent again without them. The exit code is 1 when any line
was not published.

Every request carries an Idempotency-Key (--idempotency-key, or a random one); a
request that got no answer, or a 429, is sent again with the same key, up to 3 times,
so an event is never published twice.`,
		Example: `  roomctl publish orders --type order.created --data '{"orderId":"A-1","total":25.5}' --correlation-id checkout-42
  jq -c '.[]' orders.json | roomctl publish orders --type order.created --jsonl -
  roomctl publish orders --jsonl events.jsonl -o json`,
		Args: exactArgs("ROOM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			attrs, err := parseAttributes(p.attributes)
			if err != nil {
				return err
			}
			set := cmd.Flags().Changed
			if p.jsonl != "" {
				if p.data != "" || p.dataFile != "" {
					return usagef("--jsonl takes the payloads from its lines: give no --data or --data-file")
				}
				if p.batchSize < 1 || p.batchSize > maxBatch {
					return usagef("--batch-size must be from 1 to %d", maxBatch)
				}
				return a.publishLines(cmd, args[0], p, attrs, set("version"))
			}
			if p.eventType == "" {
				return usagef("give the event type with --type (or many events with --jsonl)")
			}
			payload, ok, err := a.jsonInput(p.data, p.dataFile, "data", "data-file")
			if err != nil {
				return err
			}
			if !ok {
				return usagef("give the payload with --data or --data-file (- for standard input)")
			}
			msg := client.MessageInput{EventType: p.eventType, Payload: payload}
			if set("version") {
				msg.EventTypeVersion = &p.version
			}
			if p.correlationID != "" {
				msg.CorrelationId = &p.correlationID
			}
			if len(attrs) > 0 {
				msg.Attributes = &attrs
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			key := p.idempotencyKey
			if key == "" {
				key = newIdempotencyKey()
			}
			var resp *client.PublishMessageResponse
			err = a.retry(cmd.Context(), func(ctx context.Context) (int, http.Header, error) {
				var err error
				resp, err = c.PublishMessageWithResponse(ctx, args[0], &client.PublishMessageParams{IdempotencyKey: &key}, msg)
				if err != nil {
					return 0, nil, err
				}
				return resp.StatusCode(), resp.HTTPResponse.Header, nil
			})
			return a.show(resp, err, func(t *table) {
				m := resp.JSON202
				t.row("EVENT ID", m.EventId)
				t.row("CORRELATION ID", m.CorrelationId)
				t.row("EVENT TYPE", fmt.Sprintf("%s v%d", m.EventType, m.EventTypeVersion))
				t.row("DESTINATIONS", m.Destinations)
				t.row("PUBLISHED", m.PublishedAt)
				t.row("EXPIRES", orNull(m.ExpiresAt, func(v time.Time) string { return cell(v) }))
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&p.eventType, "type", "t", "", "the event type (with --jsonl: of every line, each line then being a payload)")
	f.IntVar(&p.version, "version", 0, "the event type's version (default: the newest)")
	f.StringVarP(&p.data, "data", "d", "", "the payload, JSON")
	f.StringVar(&p.dataFile, "data-file", "", "a file holding the payload (- for standard input)")
	f.StringVar(&p.correlationID, "correlation-id", "", "the correlation id (with --jsonl: of the lines without one; default a new UUID)")
	f.StringArrayVarP(&p.attributes, "attribute", "a", nil, "an attribute NAME=VALUE; repeat for more (with --jsonl: of the lines without attributes)")
	f.StringVar(&p.idempotencyKey, "idempotency-key", "", "the Idempotency-Key of the publish (default: a random one; with --jsonl each batch gets its own)")
	f.StringVar(&p.jsonl, "jsonl", "", "publish many events: a file of JSON lines (- for standard input)")
	f.IntVar(&p.batchSize, "batch-size", maxBatch, "with --jsonl: events per request (1 to 100)")
	cmd.MarkFlagsMutuallyExclusive("data", "data-file")
	cmd.MarkFlagsMutuallyExclusive("jsonl", "idempotency-key")
	_ = cmd.MarkFlagFilename("data-file", "json")
	_ = cmd.MarkFlagFilename("jsonl", "jsonl", "json")
	return cmd
}

// parseAttributes reads NAME=VALUE flags.
func parseAttributes(values []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return nil, usagef("--attribute %q is not NAME=VALUE", v)
		}
		out[name] = value
	}
	return out, nil
}

// newIdempotencyKey is a random Idempotency-Key.
func newIdempotencyKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "roomctl-" + hex.EncodeToString(b)
}

// retry makes a request (send, with a context bounded by --timeout) and
// makes it again, up to publishRetries times, when it got no answer or a
// 429 (after its Retry-After, at most a minute). send must carry an
// Idempotency-Key: a request that got no answer may have been stored.
func (a *cli) retry(ctx context.Context, send func(context.Context) (status int, header http.Header, err error)) error {
	wait := time.Second
	for attempt := 0; ; attempt++ {
		reqCtx, cancel := context.WithTimeout(ctx, a.timeout)
		status, header, err := send(reqCtx)
		cancel()
		if attempt == publishRetries || ctx.Err() != nil {
			return err
		}
		switch {
		case err != nil:
			fmt.Fprintf(a.err, "roomctl: no answer (%v); sending again in %v with the same Idempotency-Key\n", err, wait)
		case status == http.StatusTooManyRequests:
			wait = retryAfter(header.Get("Retry-After"), wait)
			fmt.Fprintf(a.err, "roomctl: the publish rate limit is reached; sending again in %v\n", wait)
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// retryAfter is a Retry-After of whole seconds, within 1 s and a minute,
// or def.
func retryAfter(header string, def time.Duration) time.Duration {
	n, err := strconv.Atoi(header)
	if err != nil {
		return def
	}
	return min(max(time.Duration(n)*time.Second, time.Second), time.Minute)
}

// line is one line of --jsonl: its number and message, or why it is not
// one.
type line struct {
	n   int
	msg client.MessageInput
	err error
}

// lineResult is what became of one line, as -o json writes it.
type lineResult struct {
	Line      int             `json:"line"`
	Published json.RawMessage `json:"published,omitempty"`
	Error     *lineError      `json:"error,omitempty"`
}

// lineError is why a line was not published: the problem of its batch
// (with the field errors of its message, named within it), or a local
// one.
type lineError struct {
	Status  int                 `json:"status,omitempty"`
	Title   string              `json:"title"`
	Detail  string              `json:"detail,omitempty"`
	Errors  []client.FieldError `json:"errors,omitempty"`
	Unknown bool                `json:"unknown,omitempty"` // no answer came: it may have been published
}

// publishLines publishes the JSON lines of p.jsonl in batches.
func (a *cli) publishLines(cmd *cobra.Command, room string, p publishFlags, attrs map[string]string, versionSet bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	in := a.in
	if p.jsonl != "-" {
		f, err := os.Open(p.jsonl)
		if err != nil {
			return usagef("read %s: %v", p.jsonl, err)
		}
		defer f.Close()
		in = f
	}
	var params client.PublishMessageBatchParams
	if p.correlationID != "" {
		params.XCorrelationID = &p.correlationID
	}
	prefix := newIdempotencyKey()
	r := lineReporter{a: a}
	// chunk is the lines read since the last batch, the bad ones included,
	// so that results are reported in line order.
	var chunk []line
	valid, batches := 0, 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		batches++
		send := make([]line, 0, valid)
		for _, l := range chunk {
			if l.err == nil {
				send = append(send, l)
			}
		}
		outcomes, err := a.publishBatch(cmd.Context(), c, room, params, fmt.Sprintf("%s-%d", prefix, batches), send)
		for _, l := range chunk {
			switch o, ok := outcomes[l.n]; {
			case l.err != nil:
				r.failed(l.n, &lineError{Title: l.err.Error()})
			case ok && o.err != nil:
				r.failed(l.n, o.err)
			case ok:
				r.published(l.n, o.raw, o.msg)
			default:
				r.failed(l.n, &lineError{Title: "not sent: an earlier request got no answer"})
			}
		}
		chunk, valid = chunk[:0], 0
		return err
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64*1024), 16<<20)
	for n := 1; scanner.Scan(); n++ {
		text := bytes.TrimSpace(scanner.Bytes())
		if len(text) == 0 {
			continue
		}
		l := parseLine(n, text, p, attrs, versionSet)
		chunk = append(chunk, l)
		if l.err == nil {
			valid++
		}
		if valid == p.batchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := scanner.Err(); err != nil {
		_ = flush()
		return usagef("read %s: %v", p.jsonl, err)
	}
	if err := flush(); err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	fmt.Fprintf(a.err, "published %d of %d lines\n", r.ok, r.ok+r.failures)
	if r.failures > 0 {
		return failedError{fmt.Sprintf("%d of %d lines were not published", r.failures, r.ok+r.failures)}
	}
	return nil
}

// parseLine reads one line: a message, or with --type its payload.
func parseLine(n int, text []byte, p publishFlags, attrs map[string]string, versionSet bool) line {
	l := line{n: n}
	if !json.Valid(text) {
		l.err = errors.New("the line is not JSON")
		return l
	}
	if p.eventType != "" {
		l.msg = client.MessageInput{EventType: p.eventType, Payload: json.RawMessage(text)}
	} else {
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l.msg); err != nil {
			l.err = fmt.Errorf("the line is not a message (eventType, payload, eventTypeVersion, correlationId, attributes): %w", err)
			return l
		}
	}
	if versionSet && l.msg.EventTypeVersion == nil {
		v := p.version
		l.msg.EventTypeVersion = &v
	}
	if len(attrs) > 0 && l.msg.Attributes == nil {
		m := attrs
		l.msg.Attributes = &m
	}
	return l
}

// messageField is a field error's field of messages[i].
var messageField = regexp.MustCompile(`^messages\[(\d+)\](?:\.(.*))?$`)

// outcome is what became of one line sent.
type outcome struct {
	raw json.RawMessage
	msg client.PublishedMessage
	err *lineError
}

// publishBatch publishes batch and returns each line's outcome by line
// number; when the API refuses the batch naming some of its messages, those
// lines fail and the others are sent again. When a request gets no answer
// its lines' outcomes are unknown, and the error says so.
func (a *cli) publishBatch(ctx context.Context, c *client.ClientWithResponses, room string, params client.PublishMessageBatchParams, key string, batch []line) (map[int]outcome, error) {
	out := make(map[int]outcome, len(batch))
	for round := 1; len(batch) > 0; round++ {
		msgs := make([]client.MessageInput, len(batch))
		for i, l := range batch {
			msgs[i] = l.msg
		}
		k := fmt.Sprintf("%s-%d", key, round)
		params.IdempotencyKey = &k
		var resp *client.PublishMessageBatchResponse
		err := a.retry(ctx, func(ctx context.Context) (int, http.Header, error) {
			var err error
			resp, err = c.PublishMessageBatchWithResponse(ctx, room, &params, client.MessageBatchInput{Messages: msgs})
			if err != nil {
				return 0, nil, err
			}
			return resp.StatusCode(), resp.HTTPResponse.Header, nil
		})
		if err != nil {
			for _, l := range batch {
				out[l.n] = outcome{err: &lineError{Title: "no answer", Detail: err.Error(), Unknown: true}}
			}
			return out, requestError(err)
		}
		problem := client.Check(resp)
		if problem == nil {
			var items struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(resp.Body, &items); err != nil || len(items.Items) != len(batch) || len(resp.JSON202.Items) != len(batch) {
				return out, fmt.Errorf("the batch answer has %d items for %d messages: %s", len(items.Items), len(batch), truncate(string(resp.Body), 200))
			}
			for i, l := range batch {
				out[l.n] = outcome{raw: items.Items[i], msg: resp.JSON202.Items[i]}
			}
			return out, nil
		}
		var p *client.Problem
		if !errors.As(problem, &p) {
			return out, problem
		}
		named := namedMessages(p, len(batch))
		for i, l := range batch {
			if errs, bad := named[i]; bad || len(named) == 0 {
				e := &lineError{Status: p.Status, Title: p.Title, Errors: errs}
				if p.Detail != nil && len(errs) == 0 {
					e.Detail = *p.Detail
				}
				out[l.n] = outcome{err: e}
			}
		}
		if len(named) == 0 {
			return out, nil
		}
		rest := batch[:0:0]
		for i, l := range batch {
			if _, bad := named[i]; !bad {
				rest = append(rest, l)
			}
		}
		batch = rest
	}
	return out, nil
}

// namedMessages is the field errors of a batch's problem by the index of
// the message they name, with the fields named within it (payload.total);
// nil unless every error names one of the n messages.
func namedMessages(p *client.Problem, n int) map[int][]client.FieldError {
	if p.Errors == nil {
		return nil
	}
	named := map[int][]client.FieldError{}
	for _, fe := range *p.Errors {
		m := messageField.FindStringSubmatch(fe.Field)
		if m == nil {
			return nil
		}
		i, err := strconv.Atoi(m[1])
		if err != nil || i >= n {
			return nil
		}
		fe.Field = m[2]
		if fe.Field == "" {
			fe.Field = "message"
		}
		named[i] = append(named[i], fe)
	}
	return named
}

// lineReporter prints each line's result as it comes, and counts them.
type lineReporter struct {
	a            *cli
	ok, failures int
	err          error
}

func (r *lineReporter) write(res lineResult, text string) {
	if r.err != nil {
		return
	}
	if r.a.json() {
		raw, _ := json.Marshal(res)
		_, r.err = fmt.Fprintf(r.a.out, "%s\n", raw)
		return
	}
	_, r.err = fmt.Fprintln(r.a.out, text)
}

func (r *lineReporter) published(n int, raw json.RawMessage, m client.PublishedMessage) {
	r.ok++
	r.write(lineResult{Line: n, Published: raw}, fmt.Sprintf("line %d: published %s (correlation %s, %s v%d, %d destinations)",
		n, m.EventId, m.CorrelationId, m.EventType, m.EventTypeVersion, m.Destinations))
}

func (r *lineReporter) failed(n int, e *lineError) {
	r.failures++
	text := fmt.Sprintf("line %d: not published: ", n)
	if e.Status != 0 {
		text += fmt.Sprintf("%d ", e.Status)
	}
	text += e.Title
	if e.Detail != "" {
		text += ": " + e.Detail
	}
	for _, fe := range e.Errors {
		text += fmt.Sprintf("; %s: %s", fe.Field, fe.Message)
	}
	if e.Unknown {
		text += " (it may have been published: the request got no answer)"
	}
	r.write(lineResult{Line: n, Error: e}, text)
}
