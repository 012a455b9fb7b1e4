// Package plan holds the pure decisions of the Foo controller: what
// Deployment a Foo wants, whether an existing Deployment belongs to a Foo,
// what has drifted, and what the Foo's status should say.
//
// Nothing here talks to the API server or reads a cache: every function is a
// plain function of its arguments, so each decision is tested alone with
// table tests. The controller at the repository root turns these decisions
// into API requests. (It is not named reconcile so as not to be mistaken for
// controller-runtime's package of Reconciler and Result: nothing here
// reconciles.)
package plan
