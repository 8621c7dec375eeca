//! Console tokens: made at start when the operator gave none, read from a token file, or kept
//! in a peer's data directory (mode 0600).

use super::ConsoleError;

/// A fresh console token: 32 random bytes from the ring provider's system generator, hex.
pub fn generate_token() -> Result<String, ConsoleError> {
    let provider = rustls::crypto::ring::default_provider();
    let mut b = [0u8; 32];
    provider
        .secure_random
        .fill(&mut b)
        .map_err(|_| ConsoleError::Internal("the system random generator failed".to_owned()))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads a token file (its first line, trimmed); an empty file is an error.
pub fn read_token_file(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let t = text.lines().next().unwrap_or_default().trim().to_owned();
    if t.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} holds no token", path.display()),
        ));
    }
    Ok(t)
}

/// The token in `path`, or a fresh one written there (mode 0600) when the file is missing:
/// a peer without a configured token still has one, readable only by its operator.
pub fn load_or_create_token(path: &std::path::Path) -> Result<String, ConsoleError> {
    match read_token_file(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let t = generate_token()?;
            crate::fsmode::write_private(path, format!("{t}\n").as_bytes()).map_err(|e| {
                ConsoleError::Internal(format!("cannot write {}: {e}", path.display()))
            })?;
            Ok(t)
        }
        Err(e) => Err(ConsoleError::Internal(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}
