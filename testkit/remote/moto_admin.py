"""Administers a moto S3 server for the remote-file tests (testkit::remote::MotoS3).

setup ENDPOINT            -> creates an IAM user with an access key allowed everything, then
                             turns authentication on; prints "KEY_ID SECRET".
session ENDPOINT KEY_ID SECRET
                          -> a role allowed everything, assumed through moto's STS; prints
                             "KEY_ID SECRET SESSION_TOKEN" (what a machine role hands out).
mb|put|get ENDPOINT KEY_ID SECRET BUCKET [KEY FILE]
                          -> create a bucket, upload FILE to KEY, download KEY to FILE.
"""
import json
import sys
import urllib.request

import boto3


def client(service, endpoint, key_id="testing", secret="testing"):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
    )


def main():
    cmd, endpoint = sys.argv[1], sys.argv[2]
    if cmd == "setup":
        iam = client("iam", endpoint)
        iam.create_user(UserName="plexus")
        iam.put_user_policy(
            UserName="plexus",
            PolicyName="all",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }
            ),
        )
        key = iam.create_access_key(UserName="plexus")["AccessKey"]
        req = urllib.request.Request(
            endpoint + "/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(req).read()
        print(key["AccessKeyId"], key["SecretAccessKey"])
        return
    if cmd == "session":
        key_id, secret = sys.argv[3], sys.argv[4]
        iam = client("iam", endpoint, key_id, secret)
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(
            RoleName="plexus-machine", AssumeRolePolicyDocument=json.dumps(trust)
        )["Role"]
        iam.put_role_policy(
            RoleName="plexus-machine",
            PolicyName="all",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }
            ),
        )
        c = client("sts", endpoint, key_id, secret).assume_role(
            RoleArn=role["Arn"], RoleSessionName="plexus-test"
        )["Credentials"]
        print(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
        return
    key_id, secret, bucket = sys.argv[3], sys.argv[4], sys.argv[5]
    s3 = client("s3", endpoint, key_id, secret)
    if cmd == "mb":
        s3.create_bucket(Bucket=bucket)
    elif cmd == "put":
        s3.upload_file(sys.argv[7], bucket, sys.argv[6])
    elif cmd == "get":
        s3.download_file(bucket, sys.argv[6], sys.argv[7])
    else:
        raise SystemExit("unknown command " + cmd)


main()
