// Package integration holds the tests that run foo-controller against a real
// control plane: etcd and kube-apiserver (started by envtest), with
// kube-controller-manager (deployments, replica sets, garbage collection),
// kube-scheduler and kwok (a fake kubelet, so pods really become Running)
// beside them. All binaries are built from Go modules by
// hack/install-testbin.sh.
//
// Each test runs the compiled controller binary — the same one `make run`
// and the container image run — as a child process, watching a namespace of
// the test's own, and judges it only by what the API server ends up holding
// and by the requests the API server's audit log recorded from it.
//
// The tests carry the "integration" build tag: run them with `make test`
// (or `go test -tags integration ./pkg/integration/`).
package integration
