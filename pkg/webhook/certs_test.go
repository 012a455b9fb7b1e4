package webhook

import (
	"crypto/x509"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

var (
	t0    = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	hosts = []string{"foo-controller-webhook.foo-system.svc", "127.0.0.1"}
)

// verify fails t unless data's serving certificate is one a client that
// trusts the bundle injected accepts for every host at now.
func verify(t *testing.T, data map[string][]byte, injected []byte, hosts []string, now time.Time) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(injected) {
		t.Fatalf("%s: nothing injected", now.Format(time.DateOnly))
	}
	certs, err := certutil.ParseCertsPEM(data[KeyCert])
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: h, CurrentTime: now}); err != nil {
			t.Fatalf("%s: the serving certificate, for %s, not trusted: %v", now.Format(time.DateOnly), h, err)
		}
	}
}

func mustRotate(t *testing.T, data map[string][]byte, injected []byte, hosts []string, now time.Time) (map[string][]byte, string) {
	t.Helper()
	next, why, err := rotate(data, injected, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	return next, why
}

// TestRotateFromNothing: an empty Secret gets a CA and a serving
// certificate for every host, and a second look changes nothing (no write).
func TestRotateFromNothing(t *testing.T) {
	data, why := mustRotate(t, nil, nil, hosts, t0)
	if !strings.Contains(why, "a new CA") || !strings.Contains(why, "re-issued: none readable") {
		t.Errorf("why = %q", why)
	}
	verify(t, data, data[KeyCABundle], hosts, t0)
	// An API server whose clock is a little behind accepts it too.
	verify(t, data, data[KeyCABundle], hosts, t0.Add(-30*time.Minute))
	again, why := mustRotate(t, data, data[KeyCABundle], hosts, t0.Add(time.Hour))
	if why != "" || !maps.EqualFunc(again, data, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Errorf("changed again: %q", why)
	}
}

// TestRotateRepairs: what is broken in the Secret is replaced, only it.
func TestRotateRepairs(t *testing.T) {
	data, _ := mustRotate(t, nil, nil, hosts, t0)
	other, _ := mustRotate(t, nil, nil, hosts, t0)
	for _, tc := range []struct {
		name   string
		edit   func(map[string][]byte)
		hosts  []string
		why    string
		sameCA bool
		// at: how long after t0 it is looked at (default an hour);
		// untrusted: the CRD's caBundle is empty.
		at        time.Duration
		untrusted bool
	}{
		{name: "certificate unreadable", edit: func(d map[string][]byte) { d[KeyCert] = []byte("x") }, why: "none readable", sameCA: true},
		{name: "certificate of another key", edit: func(d map[string][]byte) { d[KeyKey] = other[KeyKey] }, why: "its key does not match", sameCA: true},
		{name: "certificate of another CA", edit: func(d map[string][]byte) { d[KeyCert], d[KeyKey] = other[KeyCert], other[KeyKey] }, why: "not signed by a CA of the bundle", sameCA: true},
		{name: "another host", hosts: []string{"foo.example.svc"}, why: "not issued for [foo.example.svc] (it is for [127.0.0.1 foo-controller-webhook.foo-system.svc])", sameCA: true},
		{name: "expired, the CRD trusting nothing", at: CertValidity + time.Hour, untrusted: true, why: "re-issued: expired", sameCA: true},
		{name: "due, the CRD trusting the CA", at: CertValidity * 2 / 3, why: "re-issued: two thirds of its lifetime passed", sameCA: true},
		{name: "due, the CRD trusting nothing: kept", at: CertValidity * 2 / 3, untrusted: true, why: "", sameCA: true},
		{name: "CA key lost", edit: func(d map[string][]byte) { delete(d, keyCAKey) }, why: "a new CA"},
		{name: "CA key of another CA", edit: func(d map[string][]byte) { d[keyCAKey] = other[keyCAKey] }, why: "a new CA"},
		{name: "bundle unreadable", edit: func(d map[string][]byte) {
			d[KeyCABundle] = []byte("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
		}, why: "a new CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := maps.Clone(data)
			if tc.edit != nil {
				tc.edit(d)
			}
			h := hosts
			if tc.hosts != nil {
				h = tc.hosts
			}
			at, injected := t0.Add(time.Hour), data[KeyCABundle]
			if tc.at != 0 {
				at = t0.Add(tc.at)
			}
			if tc.untrusted {
				injected = nil
			}
			next, why := mustRotate(t, d, injected, h, at)
			if !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
				t.Errorf("why = %q, want it to say %q", why, tc.why)
			}
			if same := string(next[KeyCABundle]) == string(data[KeyCABundle]); same != tc.sameCA {
				t.Errorf("bundle kept: %v, want %v", same, tc.sameCA)
			}
			if tc.why != "" {
				verify(t, next, next[KeyCABundle], h, at)
			}
		})
	}
}

// TestRotateNeverServesAnUntrustedCertificate: 30 years of a Secret looked
// at every 10 days, and of a CRD whose caBundle is injected from the Secret
// one look late. At every look the serving certificate is trusted by the
// caBundle the API server holds then, across three CAs; the serving
// certificate is renewed before it expires; the bundle never holds more
// than two CAs.
func TestRotateNeverServesAnUntrustedCertificate(t *testing.T) {
	data, _ := mustRotate(t, nil, nil, hosts, t0)
	injected := data[KeyCABundle]
	var newCAs, reissued int
	for now := t0; now.Before(t0.Add(30 * 365 * 24 * time.Hour)); now = now.Add(10 * 24 * time.Hour) {
		next, why := mustRotate(t, data, injected, hosts, now)
		if strings.Contains(why, "a new CA") {
			newCAs++
		}
		if strings.Contains(why, "re-issued") {
			reissued++
			if strings.Contains(why, "expired") || strings.Contains(why, "not signed") {
				t.Fatalf("%s: %s", now.Format(time.DateOnly), why)
			}
		}
		verify(t, next, injected, hosts, now)
		if cas, _ := certutil.ParseCertsPEM(next[KeyCABundle]); len(cas) > 2 {
			t.Fatalf("%s: %d CAs in the bundle", now.Format(time.DateOnly), len(cas))
		}
		injected, data = data[KeyCABundle], next // the injector acts on what it saw last time
	}
	// 30 years: CAs renewed at 6.7 and 13.3 and 20 and 26.7 years; serving
	// certificates every 8 months or so.
	if newCAs != 4 || reissued < 40 || reissued > 50 {
		t.Errorf("%d new CAs, %d serving certificates re-issued", newCAs, reissued)
	}
}

// TestRotateSettlesOnHostsWrittenOtherwise: hosts given in another form
// than the certificate holds them (an IPv6 address in capitals or with
// zeros, an IPv4-mapped one, a name in capitals or with a final dot) do not
// make every look issue the certificate again.
func TestRotateSettlesOnHostsWrittenOtherwise(t *testing.T) {
	odd := []string{"FD00::1", "fd00:0::1", "::ffff:10.0.0.1", "Foo-Controller-Webhook.Foo-System.SVC.", "127.0.0.1"}
	data, _ := mustRotate(t, nil, nil, odd, t0)
	verify(t, data, data[KeyCABundle], []string{"fd00::1", "10.0.0.1", "foo-controller-webhook.foo-system.svc", "127.0.0.1"}, t0)
	if _, why := mustRotate(t, data, data[KeyCABundle], odd, t0.Add(time.Minute)); why != "" {
		t.Errorf("the second look changed it: %s", why)
	}
}

// TestRotateReplicasWithOtherHostsAgree: two replicas that differ in their
// hosts (a rollout that changes -webhook-hosts) each add theirs once, and
// then both leave the certificate alone, renewals included.
func TestRotateReplicasWithOtherHostsAgree(t *testing.T) {
	a, b := []string{"foo-controller-webhook.foo-system.svc"}, []string{"foo-webhook.foo-system.svc"}
	data, _ := mustRotate(t, nil, nil, a, t0)
	injected := data[KeyCABundle]
	writes := 0
	for i, now := 0, t0; i < 40; i, now = i+1, now.Add(10*24*time.Hour) {
		hosts := a
		if i%2 == 1 {
			hosts = b
		}
		next, why := mustRotate(t, data, injected, hosts, now)
		if why != "" {
			writes++
		}
		verify(t, next, injected, hosts, now)
		data = next
	}
	// One write for b's host; one renewal (at 8 months), for the renewing
	// replica's host only, and one write for the other's again.
	if writes != 3 {
		t.Errorf("%d writes in 400 days of two replicas looking in turn, want 3", writes)
	}
}

// TestRotateAddsNoHostWithAnUntrustedCA: while a CA is being replaced and
// the CRD does not trust the new one yet, a replica with a host the
// certificate lacks waits (a certificate from the new CA would not be
// trusted), and adds it once the CRD trusts the new CA.
func TestRotateAddsNoHostWithAnUntrustedCA(t *testing.T) {
	data, _ := mustRotate(t, nil, nil, hosts, t0)
	// Just before the CA's two thirds, renewed; just after, a new CA joins.
	at := t0.Add(caValidity*2/3 - 24*time.Hour)
	data, _ = mustRotate(t, data, data[KeyCABundle], hosts, at)
	trusted := data[KeyCABundle]
	at = at.Add(48 * time.Hour)
	data, why := mustRotate(t, data, trusted, hosts, at)
	if !strings.Contains(why, "a new CA") {
		t.Fatalf("why = %q, want a new CA", why)
	}
	more := append([]string{"foo.example.svc"}, hosts...)
	next, why := mustRotate(t, data, trusted, more, at)
	if why != "" {
		t.Fatalf("with the new CA not trusted yet: %q, want no change", why)
	}
	verify(t, next, trusted, hosts, at)
	next, why = mustRotate(t, next, next[KeyCABundle], more, at)
	if !strings.Contains(why, "the CRD trusts the new CA") {
		t.Fatalf("once trusted: %q", why)
	}
	verify(t, next, next[KeyCABundle], more, at)
}

// TestRotateDropsAHostAtRenewal: a host no replica has any more (say, one
// a `make run` added) leaves the certificate at its next renewal.
func TestRotateDropsAHostAtRenewal(t *testing.T) {
	data, _ := mustRotate(t, nil, nil, append([]string{"localhost"}, hosts...), t0)
	at := t0.Add(CertValidity * 2 / 3)
	next, why := mustRotate(t, data, data[KeyCABundle], hosts, at)
	if !strings.Contains(why, "two thirds") {
		t.Fatalf("why = %q", why)
	}
	certs, _ := certutil.ParseCertsPEM(next[KeyCert])
	if got := certHosts(certs[0]); !slices.Equal(got, canonical(hosts)) {
		t.Errorf("renewed for %v, want %v", got, canonical(hosts))
	}
}
