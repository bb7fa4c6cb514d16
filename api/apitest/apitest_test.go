package apitest

import (
	"net/http"
	"testing"
)

// TestCheckProblem: the harnesses' check takes a problem of a kind of
// api.Kinds and refuses any other: about:blank, an unknown code, or a type,
// status or title that is not its kind's.
func TestCheckProblem(t *testing.T) {
	t.Parallel()
	ok := `{"type":"/problems/not_found","code":"not_found","title":"Not found","status":404}`
	if err := CheckProblem(http.StatusNotFound, []byte(ok)); err != nil {
		t.Errorf("a not_found problem: %v", err)
	}
	for _, bad := range []struct {
		status int
		body   string
	}{
		{http.StatusNotFound, `{"type":"about:blank","title":"Not Found","status":404}`},
		{http.StatusNotFound, `{"type":"/problems/missing","code":"missing","title":"Not found","status":404}`},
		{http.StatusNotFound, `{"type":"/problems/conflict","code":"not_found","title":"Not found","status":404}`},
		{http.StatusGone, `{"type":"/problems/not_found","code":"not_found","title":"Not found","status":410}`},
		{http.StatusNotFound, `{"type":"/problems/not_found","code":"not_found","title":"Not found","status":400}`},
		{http.StatusNotFound, `{"type":"/problems/not_found","code":"not_found","title":"Not Found","status":404}`},
		{http.StatusNotFound, `not json`},
	} {
		if err := CheckProblem(bad.status, []byte(bad.body)); err == nil {
			t.Errorf("%d %s: taken", bad.status, bad.body)
		}
	}
}
