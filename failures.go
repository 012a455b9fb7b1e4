package main

import "example.com/foo-controller/pkg/plan"

// mustReport reports whether a failed write of the Deployment must be told
// on the Foo: the API server refused the object itself, or has answered
// every try with an error that may lift by itself but has not (the record
// counts them: plan.Failures). A nil err ends the count.
func (c *Controller) mustReport(rec *record, err error) bool {
	if err == nil {
		rec.applyFailures = 0
		return false
	}
	return plan.IsRefusal(err) || rec.applyFailures.Persists(err)
}
