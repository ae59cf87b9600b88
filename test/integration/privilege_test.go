package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// The operators of this suite run as a plain user bound only to the
// ClusterRole controller-gen generates (config/rbac/role.yaml), with every
// 403 and every API warning recorded: the suite fails on any 403, and the
// Pod Security test reads the warnings.
var (
	refused  = &framework.Recorder{}
	warnings = &framework.Recorder{}
)

// operatorUser is the user the operators of the suite run as.
const operatorUser = "dbkeeper-operator"

// operatorConfig creates the least-privileged operator user and returns its
// client configuration.
func operatorConfig(env *crenvtest.Environment) (*rest.Config, error) {
	root, err := envtest.RepoRoot()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	var role *rbacv1.ClusterRole
	for _, doc := range strings.Split(string(data), "\n---\n") {
		r := &rbacv1.ClusterRole{}
		if err := yaml.Unmarshal([]byte(doc), r); err == nil && r.Kind == "ClusterRole" {
			role = r
		}
	}
	if role == nil {
		return nil, fmt.Errorf("no ClusterRole in config/rbac/role.yaml")
	}
	ctx := context.Background()
	if err := admin.Create(ctx, role); err != nil {
		return nil, fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	const user = operatorUser
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if err := admin.Create(ctx, binding); err != nil {
		return nil, fmt.Errorf("binding ClusterRole %s: %w", role.Name, err)
	}
	u, err := env.AddUser(crenvtest.User{Name: user}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", user, err)
	}
	c := rest.CopyConfig(u.Config())
	c.WarningHandler = warnings
	c.WrapTransport = framework.RecordForbidden(refused)
	return c, nil
}
