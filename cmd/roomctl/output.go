package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oapi-codegen/nullable"
)

// writeJSON writes a JSON document as it is, on a line of its own.
func (a *cli) writeJSON(doc []byte) error { return a.writeJSONTo(a.out, doc) }

func (a *cli) writeJSONTo(w io.Writer, doc []byte) error {
	doc = []byte(strings.TrimSpace(string(doc)))
	if len(doc) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "%s\n", doc)
	return err
}

// table writes aligned columns: rows of a list, or FIELD value pairs of one
// object.
type table struct {
	tw    *tabwriter.Writer
	err   error
	notes []string // said on standard error after the table
}

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)}
}

// row writes one row; each cell is written with %v, nil and "" as "-".
func (t *table) row(cells ...any) {
	if t.err != nil {
		return
	}
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = cell(c)
	}
	_, t.err = fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() error {
	if t.err != nil {
		return t.err
	}
	return t.tw.Flush()
}

// cell is a value as a table shows it: one line, "-" for nothing.
func cell(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		s = x
	case *string:
		if x == nil {
			return "-"
		}
		s = *x
	case time.Time:
		if x.IsZero() {
			return "-"
		}
		s = x.Local().Format(time.RFC3339)
	case *time.Time:
		if x == nil {
			return "-"
		}
		return cell(*x)
	case json.RawMessage:
		s = string(x)
	default:
		s = fmt.Sprint(x)
	}
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to n runes with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// ms shows a number of milliseconds as a duration: 1500 as 1.5s, 5400000
// as 1h30m.
func ms[T ~int | ~int32 | ~int64](v T) string {
	d := time.Duration(v) * time.Millisecond
	if d < time.Minute || d%time.Second != 0 {
		return d.String()
	}
	h, m, s := d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 || h > 0 && s > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// orNull shows a nullable value with show, or "-" for null.
func orNull[T any](n nullable.Nullable[T], show func(T) string) string {
	v, err := n.Get()
	if err != nil {
		return "-"
	}
	return show(v)
}

// str is fmt.Sprint for orNull.
func str[T any](v T) string { return fmt.Sprint(v) }

// attributes shows a string map as k=v pairs in name order.
func attributes(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(m[k])
	}
	return strings.Join(parts, " ")
}

// nextPage tells a person how to get the page after this one.
func (a *cli) nextPage(cursor *string) {
	if cursor != nil && *cursor != "" && !a.json() {
		fmt.Fprintf(a.err, "(more: add --cursor %s)\n", *cursor)
	}
}

// nextPage notes how to get the page after the table's.
func (t *table) nextPage(cursor *string) {
	if cursor != nil && *cursor != "" {
		t.notes = append(t.notes, "(more: add --cursor "+*cursor+")")
	}
}
