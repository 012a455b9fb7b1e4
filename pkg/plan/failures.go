package plan

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// IsRefusal reports whether an error from writing the Deployment is the
// API server refusing that object (it will not change by itself), as
// opposed to a failure of the request (timeouts, unavailability,
// throttling, conflicts).
func IsRefusal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// ReportAfterFailures is how many syncs in a row must fail with an answer
// that may lift by itself (see Failures) before the Foo says so: with the
// workqueue's backoff (5 ms doubling), about 20 s of failures, past a
// webhook's restart.
const ReportAfterFailures = 12

// Failures counts one Foo's syncs in a row whose write of the Deployment
// the API server answered with an error that may lift by itself (the zero
// value: none).
type Failures int

// Persists counts a failed write's err, and reports whether it is time to
// say so on the Foo although it may lift by itself. Such an answer is any
// that is not about the API server's own load or our stale copy; the usual
// case is an admission webhook that cannot be called (500, "failed calling
// webhook") or that denies with a code of its own. Any other failure (an
// API server away or overloaded: 429, 503, 504; a conflict) starts the
// count again: a status write would add to the load, or the next sync
// fixes it.
func (f *Failures) Persists(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) {
		*f = 0
		return false
	}
	*f++
	return *f >= ReportAfterFailures
}

// Refused is obs with the API server's refusal, err, to report. The
// condition's message quotes the API server's own words, which name the
// Deployment already, not our wrapping of them.
func Refused(obs Observation, err error) Observation {
	obs.ApplyError = err
	var refusal *apierrors.StatusError
	if errors.As(err, &refusal) {
		obs.ApplyError = refusal
	}
	return obs
}
