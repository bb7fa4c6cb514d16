package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/client"
)

// Exit codes (roomctl --help lists them).
const (
	exitOK          = 0
	exitFailed      = 1   // the API refused the request, or a part of the work failed
	exitUsage       = 2   // the command line is wrong
	exitUnreachable = 3   // the service could not be reached or did not answer in time
	exitInterrupted = 130 // Ctrl-C, as shells report it
)

// usageError is a command line roomctl cannot run: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef is a usageError.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// apiError is an answer of the API that is not a 2xx: exit 1.
type apiError struct {
	problem     *client.Problem
	body        []byte
	contentType string
}

func (e apiError) Error() string { return e.problem.Error() }

// unreachableError is a request that got no answer: exit 3.
type unreachableError struct{ err error }

func (e unreachableError) Error() string { return e.err.Error() }
func (e unreachableError) Unwrap() error { return e.err }

// failedError is work that went partly wrong, already reported line by
// line (publish, verify): exit 1 with msg.
type failedError struct{ msg string }

func (e failedError) Error() string { return e.msg }

// requestError is the error of a request that could not be made or got no
// answer.
func requestError(err error) error {
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		if errors.Is(err, context.DeadlineExceeded) {
			return unreachableError{fmt.Errorf("no answer in time (--timeout): %w", err)}
		}
		return unreachableError{err}
	}
	return err
}

// exit prints err, if any, as its kind asks and returns the exit code.
func (a *cli) exit(cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var (
		usage  usageError
		api    apiError
		failed failedError
		gone   unreachableError
	)
	switch {
	case errors.Is(err, context.Canceled) && cmd != nil && cmd.Context().Err() != nil:
		fmt.Fprintln(a.err, "roomctl: interrupted")
		return exitInterrupted
	case errors.As(err, &api):
		a.printProblem(api)
		return exitFailed
	case errors.As(err, &failed):
		fmt.Fprintln(a.err, "roomctl:", failed.msg)
		return exitFailed
	case errors.As(err, &gone):
		fmt.Fprintln(a.err, "roomctl: the service did not answer:", gone.err)
		return exitUnreachable
	case errors.As(err, &usage), isCobraUsage(err):
		fmt.Fprintln(a.err, "roomctl:", err)
		if cmd != nil {
			fmt.Fprintf(a.err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return exitUsage
	}
	fmt.Fprintln(a.err, "roomctl:", err)
	return exitFailed
}

// isCobraUsage tells the errors cobra makes of a command line (an unknown
// command of the root, a required flag missing, flags that exclude each
// other) from the others.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, s := range []string{"unknown command", "required flag", "if any flags in the group", "none of the others can be", "at least one of the flags"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// printProblem writes an API error: with -o json the problem document as
// the API sent it, else its status, title, detail, each field it names and
// the request id.
func (a *cli) printProblem(e apiError) {
	if a.json() && strings.Contains(e.contentType, "json") && json.Valid(e.body) {
		_ = a.writeJSONTo(a.err, e.body)
		return
	}
	p := e.problem
	fmt.Fprintf(a.err, "roomctl: %d %s", p.Status, p.Title)
	if p.Detail != nil && *p.Detail != "" {
		fmt.Fprintf(a.err, ": %s", *p.Detail)
	}
	fmt.Fprintln(a.err)
	if p.Errors != nil {
		for _, f := range *p.Errors {
			fmt.Fprintf(a.err, "  %s: %s", f.Field, f.Message)
			if f.Pointer != nil && *f.Pointer != "" {
				fmt.Fprintf(a.err, " (at %s)", *f.Pointer)
			}
			fmt.Fprintln(a.err)
		}
	}
	if p.Type != "" && p.Type != "about:blank" {
		fmt.Fprintf(a.err, "  type: %s\n", p.Type)
	}
	if p.RequestId != nil && *p.RequestId != "" {
		fmt.Fprintf(a.err, "  request id: %s\n", *p.RequestId)
	}
}
