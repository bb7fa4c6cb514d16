package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/push"
)

// verifyFlags are the flags of verify.
type verifyFlags struct {
	secrets                              []string
	secretFile, requestFile, headersFile string
	headers                              []string
	id, timestamp, signature             string
	body, bodyFile                       string
	tolerance                            time.Duration
}

func (a *cli) verifyCommand() *cobra.Command {
	var v verifyFlags
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the signature of a push request a webhook endpoint received",
		Long: `Check a push request's Standard Webhooks signature as a receiver should: one of the
"v1,<base64>" entries of webhook-signature must be the HMAC-SHA256, under the
subscription's signing secret, of webhook-id "." webhook-timestamp "." body, and
webhook-timestamp must be within --tolerance of now. During a secret rotation the
request carries a signature per secret: give the secrets you accept (--secret, repeated,
or --secret-file, one per line).

The request comes whole from --request-file (as received: request line, headers, a
blank line, the body; - for standard input), or in parts: the headers from
--headers-file ("Name: value" lines, as curl -D writes them) or --header, overridden
by --id, --timestamp and --signature; the body from --body or --body-file, byte for
byte (a trailing newline is part of it).

Exit code 0: valid; 1: invalid (the reason is printed); 2: the input is incomplete.`,
		Example: `  roomctl verify --secret "$SECRET" --request-file request.http
  roomctl verify --secret-file secrets.txt --headers-file headers.txt --body-file body.json
  roomctl verify --secret "$SECRET" --id "$ID" --timestamp "$TS" --signature "$SIG" --body '{"orderId":"A-1"}'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdin := 0
			for _, name := range []string{v.secretFile, v.requestFile, v.headersFile, v.bodyFile} {
				if name == "-" {
					stdin++
				}
			}
			if stdin > 1 {
				return usagef("standard input can give only one of the files")
			}
			secrets, err := v.readSecrets(a)
			if err != nil {
				return err
			}
			h, body, err := v.request(a, cmd.Flags().Changed("body"))
			if err != nil {
				return err
			}
			id, ts, sig := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
			for name, value := range map[string]string{"webhook-id (--id)": id, "webhook-timestamp (--timestamp)": ts, "webhook-signature (--signature)": sig} {
				if value == "" {
					return usagef("the request has no %s", name)
				}
			}
			which, verr := push.Verify(secrets, id, ts, body, sig, time.Now(), v.tolerance)
			if verr != nil && !errors.Is(verr, push.ErrMismatch) && !errors.Is(verr, push.ErrNoSignature) && !errors.Is(verr, push.ErrTimestamp) {
				return usageError{verr} // a secret that is not one
			}
			return a.verdict(id, ts, which, len(secrets), verr)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&v.secrets, "secret", nil, "a signing secret (whsec_...) to accept; repeat for more")
	f.StringVar(&v.secretFile, "secret-file", "", "a file of signing secrets, one per line (- for standard input)")
	f.StringVar(&v.requestFile, "request-file", "", "the whole request as received (- for standard input)")
	f.StringVar(&v.headersFile, "headers-file", "", `a file of "Name: value" header lines (- for standard input)`)
	f.StringArrayVarP(&v.headers, "header", "H", nil, `a header "Name: value"; repeat for more`)
	f.StringVar(&v.id, "id", "", "the webhook-id header")
	f.StringVar(&v.timestamp, "timestamp", "", "the webhook-timestamp header (Unix seconds)")
	f.StringVar(&v.signature, "signature", "", "the webhook-signature header")
	f.StringVar(&v.body, "body", "", "the body, as received")
	f.StringVar(&v.bodyFile, "body-file", "", "a file holding the body, as received (- for standard input)")
	f.DurationVar(&v.tolerance, "tolerance", 5*time.Minute, "how far webhook-timestamp may be from now (0: not checked, for a request saved earlier)")
	cmd.MarkFlagsMutuallyExclusive("body", "body-file")
	cmd.MarkFlagsMutuallyExclusive("request-file", "headers-file")
	cmd.MarkFlagsMutuallyExclusive("request-file", "body")
	cmd.MarkFlagsMutuallyExclusive("request-file", "body-file")
	return cmd
}

// readSecrets is the secrets of --secret and --secret-file.
func (v *verifyFlags) readSecrets(a *cli) ([]string, error) {
	secrets := append([]string(nil), v.secrets...)
	if v.secretFile != "" {
		raw, err := a.input(v.secretFile)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
				secrets = append(secrets, s)
			}
		}
	}
	if len(secrets) == 0 {
		return nil, usagef("give the subscription's signing secret with --secret or --secret-file")
	}
	return secrets, nil
}

// request is the headers and body of the request the flags give.
func (v *verifyFlags) request(a *cli, bodySet bool) (http.Header, []byte, error) {
	h := http.Header{}
	var body []byte
	switch {
	case v.requestFile != "":
		raw, err := a.input(v.requestFile)
		if err != nil {
			return nil, nil, err
		}
		if h, body, err = parseRequest(raw); err != nil {
			return nil, nil, usagef("--request-file %s: %v", v.requestFile, err)
		}
	case v.headersFile != "":
		raw, err := a.input(v.headersFile)
		if err != nil {
			return nil, nil, err
		}
		h = parseHeaderLines(raw)
	}
	for _, line := range v.headers {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, nil, usagef("--header %q is not \"Name: value\"", line)
		}
		h.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	for name, value := range map[string]string{"Webhook-Id": v.id, "Webhook-Timestamp": v.timestamp, "Webhook-Signature": v.signature} {
		if value != "" {
			h.Set(name, value)
		}
	}
	switch {
	case bodySet:
		body = []byte(v.body)
	case v.bodyFile != "":
		raw, err := a.input(v.bodyFile)
		if err != nil {
			return nil, nil, err
		}
		body = raw
	case v.requestFile == "":
		return nil, nil, usagef("give the body with --body or --body-file, or the whole request with --request-file")
	}
	return h, body, nil
}

// parseRequest reads a request as received: a request line (optional),
// headers, a blank line and the body.
func parseRequest(raw []byte) (http.Header, []byte, error) {
	r := bufio.NewReader(bytes.NewReader(raw))
	first, _ := r.Peek(min(len(raw), 512))
	if line, _, _ := strings.Cut(string(first), "\n"); strings.Contains(line, " HTTP/") {
		req, err := http.ReadRequest(r)
		if err != nil {
			return nil, nil, err
		}
		body, err := io.ReadAll(req.Body)
		return req.Header, body, err
	}
	mime, err := textproto.NewReader(r).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	body, err := io.ReadAll(r)
	return http.Header(mime), body, err
}

// parseHeaderLines reads "Name: value" lines; others (a status line, blank
// lines) are skipped.
func parseHeaderLines(raw []byte) http.Header {
	h := http.Header{}
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if ok && name != "" && !strings.ContainsAny(name, " \t") {
			h.Add(name, strings.TrimSpace(value))
		}
	}
	return h
}

// verdict prints whether the request verified.
func (a *cli) verdict(id, ts string, which, secrets int, verr error) error {
	if a.json() {
		out := map[string]any{"valid": verr == nil, "webhookId": id, "webhookTimestamp": ts}
		if verr == nil {
			out["secret"] = which + 1
		} else {
			out["error"] = verr.Error()
		}
		raw, _ := json.Marshal(out)
		if err := a.writeJSON(raw); err != nil {
			return err
		}
		if verr != nil {
			return failedError{"invalid: " + verr.Error()}
		}
		return nil
	}
	if verr != nil {
		return failedError{"invalid: " + verr.Error()}
	}
	_, err := fmt.Fprintf(a.out, "valid: webhook-id %s, webhook-timestamp %s, signed with secret %d of %d\n", id, ts, which+1, secrets)
	return err
}
