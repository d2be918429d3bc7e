package dashboard

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/cmd/admitq/internal/quotainput"
)

// parseQuotaForm reads the quota fields with the command line's checks
// (package quotainput), so the form and admitq quota set agree on every
// message. The map holds each bad field's message, for beside the field.
func parseQuotaForm(r *http.Request) (admission.Quota, map[string]string, error) {
	q, errs, err := quotainput.Parse(r.PostFormValue("limit"), r.PostFormValue("window"), r.PostFormValue("max-delay"), r.PostFormValue("mode"),
		r.PostFormValue("max-in-flight"), r.PostFormValue("max-parked"))
	out := map[string]string{}
	for f, e := range errs {
		out[f] = e.Message()
	}
	w, werr := quotainput.ParseWeight(r.PostFormValue("weight"))
	if werr != nil {
		out["weight"] = werr.Message()
		err = errors.Join(err, werr)
	}
	if err != nil {
		return admission.Quota{}, out, err
	}
	q, err = quotainput.WithWeight(q, w)
	if err != nil {
		return admission.Quota{}, nil, err
	}
	return q, nil, nil
}

// formatWeight is a quota's weight for its field: "" for 0 (meaning 1).
func formatWeight(w float64) string {
	if w == 0 {
		return ""
	}
	return strconv.FormatFloat(w, 'g', -1, 64)
}

func itoa(n int) string { return strconv.Itoa(n) }

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
