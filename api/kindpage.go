package api

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// ProblemTypePage answers GET /problems/{code}, where a problem's type URI
// leads: the kind with that code, documented for people as an HTML page.
func ProblemTypePage(c echo.Context) error {
	k := KindOf(c.Param("code"))
	if k == nil {
		return fmt.Errorf("problem type %q: %w", c.Param("code"), ErrNotFound)
	}
	var b bytes.Buffer
	if err := kindPage.Execute(&b, k); err != nil {
		return err
	}
	return c.HTMLBlob(http.StatusOK, b.Bytes())
}

var kindPage = template.Must(template.New("kind").Funcs(template.FuncMap{"code": codeSpans}).Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>{{.Title}} ({{.Code}})</title></head>
<body>
<h1>{{.Title}}</h1>
<p>Problem type <code>{{.Type}}</code>, code <code>{{.Code}}</code>, HTTP status {{.Status}}.</p>
<h2>What it means</h2>
<p>{{code .Meaning}}</p>
<h2>What to do</h2>
<p>{{code .Action}}</p>
<p>Every kind of problem is listed in the API guide (docs/api-guide.md, "Problem types") and in openapi.yaml.</p>
</body>
</html>
`))

// codeSpans is s as HTML, its `quoted` parts as code.
func codeSpans(s string) template.HTML {
	var b strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 {
			b.WriteString("<code>" + template.HTMLEscapeString(part) + "</code>")
		} else {
			b.WriteString(template.HTMLEscapeString(part))
		}
	}
	return template.HTML(b.String()) //nolint:gosec // every part is escaped above
}
