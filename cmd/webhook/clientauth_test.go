package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// clientCA is a CA that signs client certificates.
type clientCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newClientCA(t *testing.T) *clientCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "api-server-clients"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &clientCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *clientCA) client(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestClientCertificatesKeepOthersOut: with --client-ca-file, a client without a certificate
// that CA signed (or, with --client-names, without the right name) fails the TLS handshake and
// never reaches the guard; the API server's certificate is served; readiness still sees the
// serving certificate.
func TestClientCertificatesKeepOthersOut(t *testing.T) {
	dir := t.TempDir()
	servingCA := servingCert(t, dir)
	ca := newClientCA(t)
	caFile := filepath.Join(dir, "client-ca.crt")
	write(t, caFile, ca.pem)
	certs := newCertLoader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = certs.Start(ctx) }()

	var reached atomic.Int64
	srv := &admissionServer{host: "127.0.0.1", port: freePort(t), shutdownTimeout: time.Second, log: logr.Discard(),
		handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached.Add(1); w.WriteHeader(http.StatusNoContent) }),
		tlsConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate, NextProtos: []string{"http/1.1"}}}
	if err := requireClientCerts(srv.tlsConfig, caFile, []string{"kube-apiserver-webhook-client"}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Start(ctx) }()
	eventually(t, 10*time.Second, "the admission server's TLS", func() error { return srv.checkTLS(nil) })

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(servingCA)
	url := "https://127.0.0.1:" + strconv.Itoa(srv.port) + "/validate"
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		want  bool
	}{
		{"no certificate", nil, false},
		{"a certificate of another CA", []tls.Certificate{newClientCA(t).client(t, "kube-apiserver-webhook-client")}, false},
		{"the CA's certificate with another name", []tls.Certificate{ca.client(t, "someone")}, false},
		{"the API server's certificate", []tls.Certificate{ca.client(t, "kube-apiserver-webhook-client")}, true},
	} {
		for _, maxVersion := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: c.certs, MaxVersion: maxVersion}}}
			before := reached.Load()
			resp, err := client.Post(url, "application/json", nil)
			if err == nil {
				resp.Body.Close()
			}
			if got := err == nil && reached.Load() == before+1; got != c.want {
				t.Errorf("%s (TLS max %x): reached the handler %v (%v), want %v", c.name, maxVersion, got, err, c.want)
			}
			client.CloseIdleConnections()
		}
	}
	if err := srv.checkTLS(nil); err != nil {
		t.Errorf("readiness with client certificates required: %v", err)
	}
}
