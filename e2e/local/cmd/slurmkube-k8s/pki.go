package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A client identity of the local cluster: one certificate and one kubeconfig.
// The controller-manager and scheduler use the names their default RBAC roles
// are bound to; our helper processes (kueue, kwok) share a group that the
// cluster-up script binds to a role.
type identity struct {
	file   string
	cn     string
	groups []string
}

var identities = []identity{
	{"admin", "slurmkube-admin", []string{"system:masters"}},
	{"kube-controller-manager", "system:kube-controller-manager", nil},
	{"kube-scheduler", "system:kube-scheduler", nil},
	{"kueue", "slurmkube:kueue", []string{"slurmkube:components"}},
	{"kwok", "slurmkube:kwok", []string{"slurmkube:components"}},
	// The API server's client certificate towards kubelets (logs, exec); the
	// real nodes' kubelets trust this CA's certificates and nothing else.
	{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", nil},
}

const validity = 5 * 365 * 24 * time.Hour

// runPKI writes the cluster's certificates and kubeconfigs into --dir. Keys and
// certificates that exist are kept (so a restart keeps the same CA and every
// client stays valid); kubeconfigs are rewritten since they only reference them.
func runPKI(args []string) int {
	fs := flag.NewFlagSet("pki", flag.ExitOnError)
	dir := fs.String("dir", "", "output directory")
	server := fs.String("server", "https://127.0.0.1:6443", "API server URL written into kubeconfigs")
	var nodes []string
	fs.Func("node", "a kubelet's Node name: writes node-<name>.kubeconfig (repeatable)", func(name string) error {
		nodes = append(nodes, name)
		return nil
	})
	_ = fs.Parse(args)
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "pki: --dir is required")
		return 2
	}
	if err := writePKI(*dir, *server, nodes); err != nil {
		fmt.Fprintln(os.Stderr, "pki:", err)
		return 1
	}
	return 0
}

// nodeIdentity is a kubelet's: the user and group the Node authorizer grants
// exactly its own Node, its pods and their secrets.
func nodeIdentity(name string) identity {
	return identity{"node-" + name, "system:node:" + name, []string{"system:nodes"}}
}

func writePKI(dir, server string, nodes []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := loadOrCreate(dir, "ca", caTemplate("slurmkube-local-ca", nil), nil, false)
	if err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}
	if _, _, err := loadOrCreate(dir, "apiserver", serving, &signer{ca, caKey}, false); err != nil {
		return err
	}
	if err := writeKueuePKI(dir); err != nil {
		return err
	}
	if err := writeKeyOnce(filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	all := append([]identity{}, identities...)
	for _, name := range nodes {
		all = append(all, nodeIdentity(name))
	}
	for _, id := range all {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: id.cn, Organization: id.groups},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if _, _, err := loadOrCreate(dir, id.file, tmpl, &signer{ca, caKey}, false); err != nil {
			return err
		}
		if err := writeKubeconfig(dir, id.file, server, caPEM); err != nil {
			return err
		}
	}
	return nil
}

type signer struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// writeKueuePKI makes the CA and webhook serving certificate Kueue's internal
// cert manager (open-policy-agent/cert-controller) accepts as already valid, so
// it keeps them instead of generating its own: a CA whose certificate verifies
// for the DNS name "kueue-ca" with an RSA PKCS#1 key (what the rotator parses),
// and a server certificate for the webhook Service name plus 127.0.0.1, which
// is where the API server really calls it.
func writeKueuePKI(dir string) error {
	ca, caKey, err := loadOrCreate(dir, "kueue-ca", caTemplate("kueue-ca", []string{"kueue"}), nil, true)
	if err != nil {
		return err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kueue-webhook-service.kueue-system.svc"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"kueue-webhook-service.kueue-system.svc", "localhost"},
	}
	_, _, err = loadOrCreate(dir, "kueue-webhook", serving, &signer{ca, caKey}, true)
	return err
}

func caTemplate(cn string, org []string) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn, Organization: org},
		DNSNames:              []string{cn},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
}

// loadOrCreate returns <name>.crt/<name>.key from dir, creating them if absent.
// A nil parent self-signs tmpl (a CA). Keys are ECDSA P-256, or RSA (PKCS#1) if rsaKey.
func loadOrCreate(dir, name string, tmpl *x509.Certificate, parent *signer, rsaKey bool) (*x509.Certificate, crypto.Signer, error) {
	crtPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if cert, key, err := load(crtPath, keyPath); err == nil {
		return cert, key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	key, keyType, keyDER, err := newKey(rsaKey)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().Add(-time.Hour)
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, now, now.Add(validity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(keyPath, keyType, keyDER); err != nil {
		return nil, nil, err
	}
	if err := writePEM(crtPath, "CERTIFICATE", der); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func load(crtPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	crtPEM, err := os.ReadFile(crtPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, kb := mustBlock(crtPEM), mustBlock(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", crtPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	var key crypto.Signer
	switch kb.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	}
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// newKey returns a private key, its PEM block type and DER encoding.
func newKey(rsaKey bool) (crypto.Signer, string, []byte, error) {
	if rsaKey {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, "", nil, err
		}
		return key, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	return key, "EC PRIVATE KEY", der, err
}

func mustBlock(data []byte) *pem.Block {
	b, _ := pem.Decode(data)
	return b
}

// writeKeyOnce creates the service-account signing key pair if absent.
func writeKeyOnce(keyPath, pubPath string) error {
	if _, err := os.Stat(keyPath); err == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := writePEM(pubPath, "PUBLIC KEY", pubDER); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", keyDER)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func writeKubeconfig(dir, name, server string, caPEM []byte) error {
	crt, err := os.ReadFile(filepath.Join(dir, name+".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(filepath.Join(dir, name+".key"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["slurmkube-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["slurmkube-local"] = &clientcmdapi.Context{Cluster: "slurmkube-local", AuthInfo: name}
	cfg.CurrentContext = "slurmkube-local"
	return clientcmd.WriteToFile(*cfg, filepath.Join(dir, name+".kubeconfig"))
}
