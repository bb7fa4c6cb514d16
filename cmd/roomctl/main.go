// Command roomctl is a command-line client of the messaging API: rooms,
// event types and versions, subscriptions, publishing, a message's
// timeline, dead letters, pulling a PULL subscription, and checking a push
// request's signature. It is built on the Go client generated from
// openapi.yaml (package client) and on cobra, which gives every command
// help (-h, --help, roomctl help COMMAND), typed flags and shell completion.
//
//	export MESSAGING_API_URL=http://localhost:8080 MESSAGING_API_KEY=mapi_...
//	roomctl rooms list
//	roomctl publish orders --type order.created --data '{"orderId":"A-1"}'
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A closed pipe (roomctl listen | head) is then a write error, which
	// listen answers by nacking what it could not print, not a kill.
	signal.Ignore(syscall.SIGPIPE)
	code := execute(ctx, os.Args[1:], streams{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.Getenv)
	stop()
	os.Exit(code)
}

// streams are a command's standard input and outputs.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// execute runs the command line args and returns the exit code.
func execute(ctx context.Context, args []string, s streams, getenv func(string) string) int {
	a := &cli{streams: s, getenv: getenv}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	cmd, err := root.ExecuteContextC(ctx)
	return a.exit(cmd, err)
}
