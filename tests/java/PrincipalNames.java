/*
 * Names SSL client principals with Kafka's and the JDK's own code, for the tests to compare
 * tierproxy's principal names with: the subject of each certificate as X500Principal.getName()
 * writes it (what Kafka's DefaultKafkaPrincipalBuilder maps), and what Kafka's
 * SslPrincipalMapper makes of it under the given rules.
 *
 * Run as a single-file source program against the embedded Kafka jars:
 *   java -cp '.kafka/<version>/libs/*' tests/java/PrincipalNames.java <cases file>
 *
 * Each line of the cases file is "<base64 rules> <base64 DER certificate>"; each line printed
 * is "<base64 subject> <base64 principal name>", or "<base64 subject> !" when the mapper
 * refuses the name (no rule applies, or the rule cannot be applied), or "!" alone when the
 * rules themselves are refused.
 */

import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Base64;

import org.apache.kafka.common.security.ssl.SslPrincipalMapper;

public class PrincipalNames {
    public static void main(String[] args) throws Exception {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        Base64.Decoder decoder = Base64.getDecoder();
        Base64.Encoder encoder = Base64.getEncoder();
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String[] fields = line.split(" ");
            String rules = new String(decoder.decode(fields[0]), StandardCharsets.UTF_8);
            X509Certificate certificate = (X509Certificate) factory.generateCertificate(
                new ByteArrayInputStream(decoder.decode(fields[1])));
            String subject = certificate.getSubjectX500Principal().getName();
            SslPrincipalMapper mapper;
            try {
                mapper = SslPrincipalMapper.fromRules(rules);
            } catch (RuntimeException e) {
                System.out.println("!");
                continue;
            }
            String name;
            try {
                name = encoder.encodeToString(mapper.getName(subject).getBytes(StandardCharsets.UTF_8));
            } catch (Exception e) {
                name = "!";
            }
            System.out.println(encoder.encodeToString(subject.getBytes(StandardCharsets.UTF_8)) + " " + name);
        }
    }
}
