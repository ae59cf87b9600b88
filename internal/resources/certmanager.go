package resources

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// CertificateGVK is cert-manager's Certificate kind, used unstructured so
// that dbkeeper needs no cert-manager Go module.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// Certificate is the cert-manager Certificate of a Database whose
// spec.tls.issuerRef is set: cert-manager issues the server certificate
// for ServerDNSNames into TLSSecretName (which then carries the
// Database's labels, so dbkeeper's label-selected cache sees it) and
// renews it. It is nil without an issuerRef.
func Certificate(db *dbv1.Database) *unstructured.Unstructured {
	if db.Spec.TLS == nil || db.Spec.TLS.IssuerRef == nil {
		return nil
	}
	ref := db.Spec.TLS.IssuerRef
	kind, group := ref.Kind, ref.Group
	if kind == "" {
		kind = "Issuer"
	}
	if group == "" {
		group = CertificateGVK.Group
	}
	names := make([]any, 0, len(ServerDNSNames(db)))
	for _, n := range ServerDNSNames(db) {
		names = append(names, n)
	}
	labels := map[string]any{}
	for k, v := range Labels(db, ComponentTLS) {
		labels[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"secretName":     TLSSecretName(db),
			"dnsNames":       names,
			"issuerRef":      map[string]any{"name": ref.Name, "kind": kind, "group": group},
			"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"usages":         []any{"server auth", "client auth", "digital signature"},
			"secretTemplate": map[string]any{"labels": labels},
		},
	}}
	u.SetGroupVersionKind(CertificateGVK)
	u.SetName(CertificateName(db))
	u.SetNamespace(db.Namespace)
	u.SetLabels(Labels(db, ComponentTLS))
	u.SetOwnerReferences([]metav1.OwnerReference{ownerReferenceOf(db)})
	return u
}
