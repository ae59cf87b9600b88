package agentapi

// The files of a Repository's Secrets, as the StatefulSet mounts them.
const (
	AccessKeyIDFile     = "accessKeyId"
	SecretAccessKeyFile = "secretAccessKey"
	CAFile              = "ca.crt"
	PassphraseFile      = "passphrase"
)

// The files a TLS directory holds besides tls.crt, tls.key and ca.crt
// when the server certificate is not signed by the Database's own CA (a
// cert-manager issuer, which may sign for others too): the Database's CA,
// which alone signs client certificates the server accepts, and the
// instances' client certificate it signed, which they present to each
// other. Without them the server certificate and its CA serve both.
const (
	ClientCAFile   = "client-ca.crt"
	ClientCertFile = "client.crt"
	ClientKeyFile  = "client.key"
)
