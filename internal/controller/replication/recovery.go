package replication

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// firstBootstrap is the bootstrap request of db's first primary: initdb,
// or the restore of spec.bootstrap.recovery, whose source repository and
// Secrets the operator reads (the pod mounts none of them) and passes in
// the request.
func (s *syncer) firstBootstrap(ctx context.Context, db *dbv1.Database) (agentapi.BootstrapRequest, error) {
	if db.Spec.Bootstrap == nil || db.Spec.Bootstrap.Recovery == nil {
		return agentapi.BootstrapRequest{Mode: agentapi.BootstrapInitdb}, nil
	}
	store, err := facet.RecoveryStore(ctx, s.reader, db)
	if err != nil {
		return agentapi.BootstrapRequest{}, err
	}
	secrets, err := s.storeSecrets(ctx, db.Namespace, store)
	if err != nil {
		return agentapi.BootstrapRequest{}, err
	}
	src := resources.RecoverySource(db, store, secrets)
	return agentapi.BootstrapRequest{Mode: agentapi.BootstrapRestore, Recovery: &src}, nil
}

// storeSecrets reads the values of store's Secrets in namespace ns.
func (s *syncer) storeSecrets(ctx context.Context, ns string, store *dbv1.ObjectStoreSpec) (agentapi.RepositorySecrets, error) {
	get := func(name, key, field string) (string, error) {
		sec := &corev1.Secret{}
		if err := s.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
			return "", fmt.Errorf("%s: getting Secret %s/%s: %w", field, ns, name, err)
		}
		v := strings.TrimSpace(string(sec.Data[key]))
		if v == "" {
			return "", fmt.Errorf("%s: Secret %s/%s has no key %s", field, ns, name, key)
		}
		return v, nil
	}
	var out agentapi.RepositorySecrets
	var err error
	const prefix = "spec.bootstrap.recovery: the object store's "
	if out.AccessKeyID, err = get(store.CredentialsSecret, agentapi.AccessKeyIDFile, prefix+"credentialsSecret"); err != nil {
		return out, err
	}
	if out.SecretAccessKey, err = get(store.CredentialsSecret, agentapi.SecretAccessKeyFile, prefix+"credentialsSecret"); err != nil {
		return out, err
	}
	if store.CASecret != "" {
		if out.CA, err = get(store.CASecret, agentapi.CAFile, prefix+"caSecret"); err != nil {
			return out, err
		}
	}
	if store.EncryptionSecret != "" {
		if out.Passphrase, err = get(store.EncryptionSecret, agentapi.PassphraseFile, prefix+"encryptionSecret"); err != nil {
			return out, err
		}
	}
	return out, nil
}
