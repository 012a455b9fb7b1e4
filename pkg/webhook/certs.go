package webhook

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The webhook's certificate is the controller's own: a CA it creates and
// keeps in a Secret, a serving certificate signed by it, and the CA
// injected into the CRD's conversion caBundle. No cert-manager to install
// first, and the same code on the local control plane as in a cluster. The
// Secret's keys:
const (
	// KeyCABundle: the CAs the API server is to trust, PEM, newest first.
	// More than one only while a CA is replaced (rotate).
	KeyCABundle = "ca.crt"
	// keyCAKey: the newest CA's private key, PEM.
	keyCAKey = "ca.key"
	// KeyCert and KeyKey: the serving certificate and its key, PEM (the
	// keys of a kubernetes.io/tls Secret).
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
)

// Lifetimes. Each is replaced once two thirds of it have passed: a serving
// certificate after some 8 months, signed by the same CA, which changes
// nothing the API server trusts; a CA after some 6.7 years, in two steps
// (rotate).
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
)

// rotate returns the Secret's data as it should be at now, for a webhook
// reached at hosts (DNS names or IP addresses), given injected, the CAs the
// CRD's caBundle holds now. why is empty when data is right as it is;
// otherwise it says what changed, for the log.
//
// A CA is replaced in two steps, so that the API server never meets a
// certificate it does not trust: first the new CA joins the bundle beside
// the old, and the serving certificate stays; only once the CRD's caBundle
// holds the new CA is the serving certificate re-issued by it. An expired
// CA leaves the bundle.
func rotate(data map[string][]byte, injected []byte, hosts []string, now time.Time) (next map[string][]byte, why string, err error) {
	hosts = canonical(hosts)
	cas, caKey := currentCA(data)
	var whys []string
	if cas == nil || !fresh(cas[0], now) {
		ca, key, err := newCA(now)
		if err != nil {
			return nil, "", err
		}
		whys = append(whys, "a new CA")
		cas, caKey = append([]*x509.Certificate{ca}, cas...), key
	}
	kept := cas[:1]
	for _, ca := range cas[1:] {
		if now.Before(ca.NotAfter) {
			kept = append(kept, ca)
		}
	}
	if len(kept) < len(cas) {
		whys = append(whys, "an expired CA removed")
	}
	cas = kept

	cert, certKey := data[KeyCert], data[KeyKey]
	if reason, kept := reissue(cert, certKey, cas, trusts(injected, cas[0]), hosts, now); reason != "" {
		if cert, certKey, err = issue(cas[0], caKey, canonical(append(kept, hosts...)), now); err != nil {
			return nil, "", err
		}
		whys = append(whys, "the serving certificate re-issued: "+reason)
	}
	if len(whys) == 0 {
		return data, "", nil
	}
	bundle, err := certutil.EncodeCertificates(cas...)
	if err != nil {
		return nil, "", err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(caKey)
	if err != nil {
		return nil, "", err
	}
	return map[string][]byte{KeyCABundle: bundle, keyCAKey: keyPEM, KeyCert: cert, KeyKey: certKey}, strings.Join(whys, "; "), nil
}

// currentCA reads the bundle and the newest CA's key; nil if either is
// unreadable or they do not belong together: a new CA is made then.
func currentCA(data map[string][]byte) ([]*x509.Certificate, crypto.Signer) {
	cas, err := certutil.ParseCertsPEM(data[KeyCABundle])
	if err != nil || len(cas) == 0 || !cas[0].IsCA {
		return nil, nil
	}
	k, err := keyutil.ParsePrivateKeyPEM(data[keyCAKey])
	if err != nil {
		return nil, nil
	}
	key, ok := k.(crypto.Signer)
	if !ok || !samePublicKey(key.Public(), cas[0].PublicKey) {
		return nil, nil
	}
	return cas, key
}

func samePublicKey(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// fresh: less than two thirds of cert's lifetime have passed.
func fresh(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return now.Before(cert.NotBefore.Add(life * 2 / 3))
}

// trusts: the injected bundle holds ca.
func trusts(injected []byte, ca *x509.Certificate) bool {
	cas, err := certutil.ParseCertsPEM(injected)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(cas, func(c *x509.Certificate) bool { return c.Equal(ca) })
}

// reissue says why the serving certificate must be issued again, or "",
// and which of its hosts the new one keeps.
//
// A certificate that is broken already (unreadable, expired, signed by
// no CA of the bundle) is re-issued at once, for our hosts. One that is
// only due (two thirds of its life passed, or signed by a CA that is being
// replaced) waits until the CRD trusts the newest CA, which signs the new
// one: a third of its life, some 4 months, for the caBundle to be
// injected; it is issued for our hosts only, so that a host no replica
// has any more leaves at the next renewal. One that lacks some of our
// hosts is re-issued at once, unless a CA is being replaced and the CRD
// does not trust the new one yet, keeping the hosts it had: replicas that
// differ in -webhook-hosts (a rollout that changes them) each add theirs,
// and agree after one write each, where replacing them would have each
// undo the other's without end.
func reissue(certPEM, keyPEM []byte, cas []*x509.Certificate, newestTrusted bool, hosts []string, now time.Time) (string, []string) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) == 0 {
		return "none readable", nil
	}
	cert := certs[0]
	k, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if key, ok := k.(crypto.Signer); err != nil || !ok || !samePublicKey(key.Public(), cert.PublicKey) {
		return "its key does not match", nil
	}
	if !now.Before(cert.NotAfter) {
		return "expired", nil
	}
	signer := slices.IndexFunc(cas, func(ca *x509.Certificate) bool { return cert.CheckSignatureFrom(ca) == nil })
	if signer < 0 {
		return "not signed by a CA of the bundle", nil
	}
	switch {
	case !newestTrusted && signer > 0:
		// A CA is being replaced and the CRD does not trust the new one
		// yet: whatever is missing waits for it, for the new certificate
		// can only be signed by the new CA.
		return "", nil
	case !newestTrusted:
	case signer > 0:
		return "the CRD trusts the new CA", nil
	case !fresh(cert, now):
		return "two thirds of its lifetime passed", nil
	}
	has := certHosts(cert)
	if missing := slices.DeleteFunc(slices.Clone(hosts), func(h string) bool { return slices.Contains(has, h) }); len(missing) > 0 {
		return fmt.Sprintf("not issued for %v (it is for %v)", missing, has), has
	}
	return "", nil
}

// canonical is hosts as a certificate holds them, sorted, each once: an IP
// address in Go's form (FD00::1 and fd00:0::1 are fd00::1), a name in
// lower case without a final dot. Compared as given, a host written
// otherwise would never match the certificate, and every look would issue
// it again.
func canonical(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			out = append(out, ip.String())
		} else {
			out = append(out, strings.TrimSuffix(strings.ToLower(h), "."))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// certHosts is what cert is issued for, canonical.
func certHosts(cert *x509.Certificate) []string {
	hosts := slices.Clone(cert.DNSNames)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	return canonical(hosts)
}

// create makes a key and a certificate of tmpl for it, signed by parent
// with parentKey, or by itself when parent is nil (a CA).
func create(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func newCA(now time.Time) (*x509.Certificate, crypto.Signer, error) {
	return create(&x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("foo-controller-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour), // a clock a little behind still accepts it
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil, nil)
}

func issue(ca *x509.Certificate, caKey crypto.Signer, hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("a serving certificate needs a host")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(CertValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	cert, key, err := create(tmpl, ca, caKey)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = certutil.EncodeCertificates(cert); err != nil {
		return nil, nil, err
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	return certPEM, keyPEM, err
}
