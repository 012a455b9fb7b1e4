package main

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"example.com/foo-controller/pkg/plan"
)

// mustReport reports whether a failed write of the Deployment must be told
// on the Foo: the API server refused the object itself (isPermanent), or
// has answered every try with an error that may lift by itself but has not
// (persists). A nil err ends the count of failures.
func (c *Controller) mustReport(rec *record, err error) bool {
	if err == nil {
		rec.applyFailures = 0
		return false
	}
	return isPermanent(err) || persists(rec, err)
}

// isPermanent reports whether an error from applying the Deployment is the
// API server refusing that object (it will not change by itself), as
// opposed to a failure of the request (timeouts, unavailability, throttling,
// conflicts).
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// reportAfterFailures is how many syncs in a row must fail with an answer
// that may lift by itself (see persists) before the Foo says so: with the
// queue's backoff (5 ms doubling), about 20 s of failures, past a
// webhook's restart.
const reportAfterFailures = 12

// persists counts the Foo's syncs in a row whose apply the API server
// answered with err, and reports whether it is time to say so on the Foo
// although it may lift by itself. Such an answer is any that is not about
// the API server's own load or our stale copy; the usual case is an
// admission webhook that cannot be called (500, "failed calling webhook")
// or that denies with a code of its own. Any other failure (an API server
// away or overloaded: 429, 503, 504; a conflict) starts the count again: a
// status write would add to the load, or the next sync fixes it.
func persists(rec *record, err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) {
		rec.applyFailures = 0
		return false
	}
	rec.applyFailures++
	return rec.applyFailures >= reportAfterFailures
}

// refused is obs with the API server's refusal, err, to report. The
// condition's message quotes the API server's own words, which name the
// Deployment already, not our wrapping of them.
func refused(obs plan.Observation, err error) plan.Observation {
	obs.ApplyError = err
	var refusal *apierrors.StatusError
	if errors.As(err, &refusal) {
		obs.ApplyError = refusal
	}
	return obs
}
