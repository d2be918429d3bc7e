package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// tlsFiles is a throwaway CA and a server certificate signed by it, as PEM
// files for redis-server and as a pool for Go clients.
type tlsFiles struct {
	caFile   string
	certFile string
	keyFile  string
	roots    *x509.CertPool
}

// clientConfig returns a new client configuration that trusts only the
// throwaway CA.
func (f *tlsFiles) clientConfig() *tls.Config {
	return &tls.Config{
		RootCAs: f.roots,
		// The certificate names the IP, and go-redis dials by IP.
		ServerName: "127.0.0.1",
		MinVersion: tls.VersionTLS12,
	}
}

// writeTLSFiles generates a CA and a certificate for 127.0.0.1, ::1 and
// localhost, valid for a day, and writes them into dir. ECDSA P-256 keeps
// generation to a millisecond or so. Serial numbers are left nil, so
// x509.CreateCertificate picks random ones.
func writeTLSFiles(dir string) (*tlsFiles, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "admitq redistest CA"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate server key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}

	f := &tlsFiles{
		caFile:   filepath.Join(dir, "ca.crt"),
		certFile: filepath.Join(dir, "server.crt"),
		keyFile:  filepath.Join(dir, "server.key"),
		roots:    x509.NewCertPool(),
	}
	f.roots.AddCert(ca)
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{
		{f.caFile, "CERTIFICATE", caDER},
		{f.certFile, "CERTIFICATE", der},
		{f.keyFile, "PRIVATE KEY", keyDER},
	} {
		data := pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der})
		if err := os.WriteFile(w.path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return f, nil
}
