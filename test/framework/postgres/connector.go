package postgres

import (
	"context"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// Connector is an instance.Connector whose every Database's primary is
// s: a controller's SQL runs against the local server, as the login it
// asks for, in the database it names (postgres when empty), over plain
// TCP on 127.0.0.1.
func (s *Server) Connector() instance.Connector { return connector{s} }

type connector struct{ srv *Server }

func (c connector) Connect(ctx context.Context, _ *dbv1.Database, login instance.Login, database string) (instance.Conn, error) {
	if database == "" {
		database = "postgres"
	}
	conn, err := sqlconn.Connect(ctx, sqlconn.Target{Host: "127.0.0.1", Port: int32(c.srv.Port), User: login.User, Password: login.Password,
		Database: database, SSLMode: "disable"})
	if err != nil {
		return nil, err
	}
	return conn, nil
}
