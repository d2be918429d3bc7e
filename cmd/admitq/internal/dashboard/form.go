package dashboard

import (
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
	if err != nil {
		out := map[string]string{}
		for f, e := range errs {
			out[f] = e.Message()
		}
		return admission.Quota{}, out, err
	}
	return q, nil, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
