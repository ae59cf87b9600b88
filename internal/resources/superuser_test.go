package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func TestSuperuserSecret(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := samples["default"]
	sec := resources.SuperuserSecret(db, eng.Superuser(), "pw")
	assert.Equal(t, "orders-superuser", sec.Name)
	assert.NotEqual(t, resources.CredentialsSecretName(db), sec.Name)
	assert.Empty(t, sec.OwnerReferences, "a deletion policy may keep it: no owner reference")
	assert.Equal(t, resources.ComponentSuperuser, sec.Labels[resources.LabelComponent])
	assert.Equal(t, map[string][]byte{"username": []byte("postgres"), "password": []byte("pw")}, sec.Data, "no uri, host or database for applications")

	assert.Equal(t, "postgres", resources.SuperuserName(eng, "app"))
	assert.Equal(t, resources.LegacySuperuserName, resources.SuperuserName(eng, "postgres"),
		"a legacy Database whose application's role is named postgres")
}
