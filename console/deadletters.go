package console

import (
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

type deadLettersData struct {
	Room     rooms.RoomResponse
	Sub      subscriptions.Response
	Items    []delivery.DeadLetterResponse
	Next     string
	Reasons  []option
	Filter   *form
	Query    url.Values // the filter as sent to the API, which the forms carry on
	Filtered bool
	Problem  *apiError
	MayAct   bool
	Max      int
}

// filterFields are the dead-letter filter's fields, named as the API's list
// query and bulk replay body name them, so that its field errors land beside
// them.
var filterFields = []string{"reason", "eventType", "since", "until"}

// deadLetterReasons are the reasons the filter offers: all the API knows,
// not only those of the page, since the API filters across pages.
var deadLetterReasons = []option{
	{Value: "", Label: "any"},
	{Value: delivery.ReasonExhausted, Label: delivery.ReasonExhausted},
	{Value: delivery.ReasonPermanent, Label: delivery.ReasonPermanent},
	{Value: delivery.ReasonExpired, Label: delivery.ReasonExpired},
	{Value: delivery.ReasonBrokerRefused, Label: delivery.ReasonBrokerRefused},
}

// deadLetterFilter is the filter in v, trimmed, without its blank fields
// (a blank field filters nothing).
func deadLetterFilter(v url.Values) url.Values {
	out := url.Values{}
	for _, name := range filterFields {
		if s := strings.TrimSpace(v.Get(name)); s != "" {
			out.Set(name, s)
		}
	}
	return out
}

// deadLettersURL is the console's dead-letter list of the subscription with
// the query q.
func (r *request) deadLettersURL(q url.Values) string {
	u := "/console/rooms/" + url.PathEscape(r.Param("room")) + "/subscriptions/" + url.PathEscape(r.Param("sub")) + "/dead-letters"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (cn *Console) deadLetters(r *request) error {
	return r.deadLettersPage(r.QueryParams(), nil, http.StatusOK)
}

// deadLettersPage lists a page of the subscription's dead letters, oldest
// first, of those the filter in values selects. The API filters, so the
// filter holds across pages and a refused filter gets the API's errors
// beside its fields.
func (r *request) deadLettersPage(values url.Values, problem *apiError, status int) error {
	d := deadLettersData{
		Problem: problem, Filter: newForm(values), Query: deadLetterFilter(values),
		Reasons: deadLetterReasons, Max: delivery.MaxReplay,
	}
	d.Filtered = len(d.Query) > 0
	if err := r.api.do(http.MethodGet, roomPath(r.Param("room")), nil, &d.Room); err != nil {
		return err
	}
	if err := r.api.do(http.MethodGet, r.subPath(), nil, &d.Sub); err != nil {
		return err
	}
	q := r.listQuery(pageSize)
	for name, vs := range d.Query {
		q[name] = vs
	}
	page, err := list[delivery.DeadLetterResponse](r, r.subPath("dead-letters"), q)
	switch p := refusal(err); {
	case err == nil:
		d.Items = page.Items
		if page.NextCursor != "" {
			// Built from the filter rather than the request's query, so
			// that a page shown after a refused POST pages on as well.
			next := maps.Clone(d.Query)
			next.Set("cursor", page.NextCursor)
			d.Next = r.deadLettersURL(next)
		}
	case p != nil && p.Status == http.StatusUnprocessableEntity:
		if d.Problem == nil { // a refused action's problem says more
			d.Problem, status = p, p.Status
		}
	default:
		return err
	}
	if d.Problem != nil {
		d.Filter.refused(d.Problem)
	}
	d.MayAct = r.api.may(http.MethodPost, r.subPath("dead-letters:replay"))
	return r.render(status, "deadletters", "Dead letters", "rooms", d)
}

// actOnDeadLetters replays or deletes the dead letters the form lists, or
// replays the oldest MaxReplay of those the filter selects. The forms carry
// the filter, so that the list shown after it is the one acted on.
func (cn *Console) actOnDeadLetters(r *request) error {
	values := r.formValues()
	ids := values["ids"]
	var err error
	done := "replayed"
	switch values.Get("action") {
	case "replay-all":
		// The filter's members are the API's; none replays the oldest of all.
		b := body{}
		for name, vs := range deadLetterFilter(values) {
			b[name] = vs[0]
		}
		err = r.api.do(http.MethodPost, r.subPath("dead-letters:replay"), b, nil)
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
		return r.deadLettersPage(values, nil, http.StatusBadRequest)
	}
	if err != nil {
		if p := refusal(err); p != nil {
			return r.deadLettersPage(values, p, p.Status)
		}
		return err
	}
	q := deadLetterFilter(values)
	q.Set("done", done)
	return r.Redirect(http.StatusSeeOther, r.deadLettersURL(q))
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
