package console

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

type deadLettersData struct {
	Room    rooms.RoomResponse
	Sub     subscriptions.Response
	Items   []delivery.DeadLetterResponse
	Shown   int // of the page, after the filter
	Next    string
	Reasons []option
	Filter  *form
	Problem *apiError
	MayAct  bool
	Max     int
}

func (cn *Console) deadLetters(r *request) error {
	return r.deadLettersPage(nil, http.StatusOK)
}

// deadLettersPage lists a page of the subscription's dead letters, oldest
// first, narrowed by the filter (reason, event type, correlation id) within
// the page.
func (r *request) deadLettersPage(problem *apiError, status int) error {
	d := deadLettersData{Problem: problem, Filter: newForm(r.QueryParams()), Max: delivery.MaxReplay}
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, r.subPath(), nil, &d.Sub); err != nil {
		return err
	}
	page, err := list[delivery.DeadLetterResponse](r, r.subPath("dead-letters"), r.listQuery(pageSize))
	if err != nil {
		return err
	}
	reason, eventType, corr := d.Filter.Get("reason"), d.Filter.Get("eventType"), strings.TrimSpace(d.Filter.Get("q"))
	seen := map[string]bool{}
	d.Reasons = []option{{Value: "", Label: "any"}}
	for _, dl := range page.Items {
		if !seen[dl.Reason] {
			seen[dl.Reason] = true
			d.Reasons = append(d.Reasons, option{Value: dl.Reason, Label: dl.Reason})
		}
		if (reason == "" || dl.Reason == reason) && (eventType == "" || dl.EventType == eventType) &&
			(corr == "" || strings.Contains(dl.CorrelationID, corr) || dl.EventID == corr) {
			d.Items = append(d.Items, dl)
		}
	}
	slices.SortFunc(d.Reasons[1:], func(a, b option) int { return strings.Compare(a.Value, b.Value) })
	d.Shown, d.Next = len(d.Items), r.nextPage(page.NextCursor)
	d.MayAct = r.api.may(http.MethodPost, r.subPath("dead-letters:replay"))
	return r.render(status, "deadletters", "Dead letters", "rooms", d)
}

// actOnDeadLetters replays or deletes the dead letters the form lists, or
// replays the oldest MaxReplay.
func (cn *Console) actOnDeadLetters(r *request) error {
	form, _ := r.FormParams()
	ids := form["ids"]
	var err error
	done := "replayed"
	switch r.FormValue("action") {
	case "replay-all":
		err = r.api.do(http.MethodPost, r.subPath("dead-letters:replay"), nil, nil)
	case "replay":
		if len(ids) == 1 {
			err = r.api.do(http.MethodPost, r.subPath("dead-letters", ids[0])+":replay", nil, nil)
		} else {
			err = r.api.do(http.MethodPost, r.subPath("dead-letters:replay"), body{"ids": ids}, nil)
		}
	case "delete":
		done = "deleted"
		if len(ids) > pageSize { // the form lists one page
			ids = ids[:pageSize]
		}
		for _, id := range ids {
			if err = r.api.do(http.MethodDelete, r.subPath("dead-letters", id), nil, nil); err != nil {
				break
			}
		}
	default:
		return r.deadLettersPage(nil, http.StatusBadRequest)
	}
	if err != nil {
		if p := refusal(err); p != nil {
			return r.deadLettersPage(p, p.Status)
		}
		return err
	}
	return r.Redirect(http.StatusSeeOther, "/console/rooms/"+url.PathEscape(r.Param("room"))+"/subscriptions/"+url.PathEscape(r.Param("sub"))+"/dead-letters?done="+done)
}

type deadLetterData struct {
	Room   rooms.RoomResponse
	Sub    subscriptions.Response
	DL     delivery.DeadLetterResponse
	MayAct bool
}

func (cn *Console) deadLetter(r *request) error {
	var d deadLetterData
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, r.subPath(), nil, &d.Sub); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, r.subPath("dead-letters", r.Param("dl")), nil, &d.DL); err != nil {
		return err
	}
	d.MayAct = r.api.may(http.MethodPost, r.subPath("dead-letters:replay"))
	return r.render(http.StatusOK, "deadletter", "Dead letter "+short(d.DL.ID), "rooms", d)
}
