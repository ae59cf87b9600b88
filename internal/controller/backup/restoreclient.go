package backup

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ensureRestoreClient makes the restore Job's client certificate
// (resources.RestoreClientSecret) when there is none: the server takes
// no superuser password over TCP (resources.ClientCertAuth), so the Job
// logs in with a certificate the manager signs with the Database's CA
// for the superuser of Secret <name>-superuser. One that exists is kept:
// it is valid for the Job's whole deadline from its creation. waiting
// names the Secret the certificate waits for (the superuser's or the CA,
// which other controllers make).
func (s *syncer) ensureRestoreClient(ctx context.Context, db *dbv1.Database) (waiting string, err error) {
	name := resources.RestoreClientSecretName(db)
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return "", fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live != nil && len(live.Data[corev1.TLSCertKey]) > 0 {
		// the Writer refuses one that is not the Database's
		_, err := s.writer.Apply(ctx, live, resources.RestoreClientSecret(db, live.Data[corev1.TLSCertKey], live.Data[corev1.TLSPrivateKeyKey]))
		return "", err
	}
	login, err := instance.SuperuserLogin(ctx, s.reader, db)
	if apierrors.IsNotFound(err) {
		return resources.SuperuserSecretName(db), nil
	}
	if err != nil {
		return "", err
	}
	pair, err := instance.IssueClient(ctx, s.reader, db, login.User, s.now(), resources.RestoreClientLifetime)
	if apierrors.IsNotFound(err) {
		return resources.CASecretName(db), nil
	}
	if err != nil {
		return "", err
	}
	log.FromContext(ctx).Info("Issuing the restore Job's client certificate", "Secret", klog.KRef(db.Namespace, name), "role", login.User)
	if _, err := s.writer.Apply(ctx, live, resources.RestoreClientSecret(db, pair.Cert, pair.Key)); err != nil {
		return "", fmt.Errorf("applying Secret %s: %w", name, err)
	}
	return "", nil
}

// deleteRestoreClient deletes the restore Job's client certificate once
// the restore has finished: nothing else logs in with it.
func (s *syncer) deleteRestoreClient(ctx context.Context, db *dbv1.Database) error {
	name := resources.RestoreClientSecretName(db)
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live == nil || !resources.Belongs(db, live) {
		return nil
	}
	if err := s.client.Delete(ctx, live, client.Preconditions{UID: ptr.To(live.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting Secret %s: %w", name, err)
	}
	log.FromContext(ctx).Info("Deleted the restore Job's client certificate: the restore has finished", "Secret", klog.KRef(db.Namespace, name))
	return nil
}
