package secret

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func (s *syncer) checkUserSecret(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	name := resources.CredentialsSecretName(db)
	t := dbv1.ConditionCredentialsReady
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return facet.Outcome{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec == nil {
		return facet.Outcome{
			Condition: conditions.False(t, dbv1.ReasonSecretNotFound, fmt.Sprintf("Secret %s named in spec.credentials.secretName does not exist: create it with the keys %s and %s", name, engine.UsernameKey, engine.PasswordKey)),
		}, nil
	}
	if missing := missingKeys(sec.Data); len(missing) > 0 {
		return facet.Outcome{
			Condition: conditions.False(t, dbv1.ReasonSecretInvalid, fmt.Sprintf("Secret %s lacks the key(s) %s: add them (dbkeeper never modifies this Secret)", name, strings.Join(missing, ", "))),
		}, nil
	}
	msg := fmt.Sprintf("using Secret %s from spec.credentials.secretName", name)
	if !optedIn(sec, db.Name) {
		ask := fmt.Sprintf("add the annotation %s: %s to it", dbv1.AnnotationCredentialsFor, db.Name)
		// in use: its password was set on the server before
		if appliedVersion(db, name) == "" {
			return facet.Outcome{Condition: conditions.False(t, dbv1.ReasonSecretNotOptedIn, fmt.Sprintf(
				"Secret %s named in spec.credentials.secretName does not say this Database may use it: %s (dbkeeper uses a Secret it did not make only with it)",
				name, ask))}, nil
		}
		// in use since before the annotation was asked for: kept, and
		// said
		msg += fmt.Sprintf("; it lacks the annotation %s, without which a new Database would not use it: %s", dbv1.AnnotationCredentialsFor, ask)
	}
	return facet.Outcome{
		Condition: conditions.True(t, dbv1.ReasonSecretProvided, msg),
		Status:    dbv1ac.DatabaseStatus().WithCredentialsSecret(name),
	}, nil
}

// optedIn reports whether sec's AnnotationCredentialsFor names the
// Database called name.
func optedIn(sec *corev1.Secret, name string) bool {
	for _, n := range strings.Split(sec.Annotations[dbv1.AnnotationCredentialsFor], ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// missingKeys lists the keys a credentials Secret lacks: a username, and a
// password key (an empty password is refused later, as a rotation the
// server does not take, RotationFailed).
func missingKeys(data map[string][]byte) []string {
	var missing []string
	if len(data[engine.UsernameKey]) == 0 {
		missing = append(missing, engine.UsernameKey)
	}
	if _, ok := data[engine.PasswordKey]; !ok {
		missing = append(missing, engine.PasswordKey)
	}
	return missing
}
