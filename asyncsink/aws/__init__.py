"""AWS credentials for every AWS-facing part of asyncsink: the Kinesis sink, the DynamoDB
record store and SigV4 signing on the HTTP and Elasticsearch sinks.

``AwsCredentialOptions`` declares the credential options once (static keys, an assumed
role); ``credential_source`` gives the process's shared, self-refreshing source for them.
"""

from .credentials import (
    AwsCredentialOptions,
    AwsIdentity,
    CredentialSource,
    credential_source,
)

__all__ = ["AwsCredentialOptions", "AwsIdentity", "CredentialSource", "credential_source"]
