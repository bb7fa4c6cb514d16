package console

import (
	"net/http"
	"net/url"

	"github.com/roomhub/messaging-api/api"
)

// pageSize is how many items a console list asks the API for at once.
const pageSize = 50

// refusal is the API's refusal of a form: the problem a page shows with the
// form (field errors beside their fields). Nil for anything else: a 401
// ends the session, a 5xx is an error page.
func refusal(err error) *apiError {
	p := problemOf(err)
	if p == nil || p.Status == http.StatusUnauthorized || p.Status >= 500 {
		return nil
	}
	return p
}

// formValues are the fields a form sent, without its CSRF token.
func (r *request) formValues() url.Values {
	v := url.Values{}
	if form, err := r.FormParams(); err == nil {
		for k, vs := range form {
			if k != "csrf" {
				v[k] = vs
			}
		}
	}
	return v
}

// listQuery asks for one page of a list, from the page's own ?cursor=.
func (r *request) listQuery(limit int) url.Values {
	q := url.Values{"limit": {itoa(limit)}}
	if cur := r.QueryParam("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	return q
}

// nextPage is the link to the page after this one, keeping its other query
// parameters; "" when there is none.
func (r *request) nextPage(cursor string) string {
	if cursor == "" {
		return ""
	}
	q := r.QueryParams()
	q.Del("done")
	q.Set("cursor", cursor)
	return r.Request().URL.Path + "?" + q.Encode()
}

// list reads one page of a list route.
func list[T any](r *request, route string, q url.Values) (api.List[T], error) {
	var out api.List[T]
	err := r.api.do(http.MethodGet, route+"?"+q.Encode(), nil, &out)
	return out, err
}
