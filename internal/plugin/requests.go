package plugin

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// annotate merges annotations into the Database's (a merge patch: the
// controllers' fields are left alone).
func annotate(ctx context.Context, env Env, db *dbv1.Database, annotations map[string]string) error {
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		db.Annotations[k] = v
	}
	if err := env.Client.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("annotating Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	return nil
}

// request asks for one run of what annotation starts, with a new token.
func request(ctx context.Context, env Env, name, annotation, what, follow string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	token := env.now().UTC().Format("20060102T150405Z")
	if db.Annotations[annotation] == token {
		return fmt.Errorf("a %s with token %s was asked for this second already", what, token)
	}
	if err := annotate(ctx, env, db, map[string]string{annotation: token}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Out, "%s of database %s/%s requested (token %s): %s\n", what, db.Namespace, db.Name, token, follow)
	return err
}

func switchover(ctx context.Context, env Env, name, pod string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	n, ok := resources.InstanceOrdinal(db, pod)
	if !ok || n >= int(db.Spec.ReplicaCount()) {
		return fmt.Errorf("%s is not an instance of Database %s/%s (its instances are %s-0 to %s-%d)",
			pod, db.Namespace, db.Name, resources.StatefulSetName(db), resources.StatefulSetName(db), db.Spec.ReplicaCount()-1)
	}
	if r := db.Status.Replication; r != nil && r.CurrentPrimary == pod && r.TargetPrimary == pod {
		_, err := fmt.Fprintf(env.Out, "%s is the primary already\n", pod)
		return err
	}
	if err := annotate(ctx, env, db, map[string]string{dbv1.AnnotationSwitchoverTo: pod}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Out, "switchover of database %s/%s to %s requested: ReplicationReady says how it goes, status.replication.currentPrimary when it is done\n",
		db.Namespace, db.Name, pod)
	return err
}

func allowRestore(ctx context.Context, env Env, name string, namespaces []string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	var list []string
	for _, ns := range namespaces {
		for _, v := range strings.Split(ns, ",") {
			if v = strings.TrimSpace(v); v != "" {
				list = append(list, v)
			}
		}
	}
	if len(list) == 0 {
		return fmt.Errorf("%w: allow-restore needs at least one namespace", ErrUsage)
	}
	value := strings.Join(list, ",")
	if err := annotate(ctx, env, db, map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: value}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Out, "Databases of %s may now restore the data of %s/%s (a dump or a point-in-time recovery)\n", value, db.Namespace, db.Name)
	return err
}
