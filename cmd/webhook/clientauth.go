package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
)

// requireClientCerts makes cfg accept only clients presenting a certificate signed by the CA in
// caFile and, when names is not empty, naming one of them (subject CN or a DNS SAN). The API
// server presents one when its --admission-control-config-file gives the webhook admission
// plugins a kubeConfigFile with a user for this Service ("<service>.<namespace>.svc"); then a
// client without it fails the TLS handshake and never reaches a review slot or the body budget.
func requireClientCerts(cfg *tls.Config, caFile string, names []string) error {
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("reading --client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return fmt.Errorf("--client-ca-file %s holds no PEM certificate", caFile)
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	if len(names) > 0 {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			leaf := cs.PeerCertificates[0]
			if slices.Contains(names, leaf.Subject.CommonName) || slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(names, n) }) {
				return nil
			}
			return fmt.Errorf("client certificate %q is not one of --client-names", leaf.Subject.CommonName)
		}
	}
	return nil
}
