//! A registry's Protobuf schema made into descriptors: `.proto` text compiled with protox (its
//! references are the files it imports, by the names it imports them with; Google's
//! well-known types are known), or a base64 serialized `FileDescriptorProto`, with base64
//! references likewise.

use base64::Engine;
use prost::Message;
use prost_reflect::DescriptorPool;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// The schema and its references as files, by name.
struct Sources(Vec<(String, String)>);

impl FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.iter().find(|(n, _)| n == name) {
            Some((n, text)) => File::from_source(n, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// A serialized `FileDescriptorProto`, if `text` is one in base64.
fn serialized(text: &str) -> Option<prost_types::FileDescriptorProto> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim()).ok()?;
    prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok().filter(|f| f.name.is_some())
}

/// The pool holding schema `id` (`text`, with `references` as (import name, text)), and the
/// name of the schema's own file in it.
pub(crate) fn pool(id: u32, text: &str, references: &[(String, String)]) -> Result<(DescriptorPool, String), String> {
    if let Some(main) = serialized(text) {
        let mut pool = DescriptorPool::global();
        for (name, t) in references {
            let r = serialized(t)
                .ok_or_else(|| format!("reference {name:?} is not a serialized descriptor, as its schema is"))?;
            pool.add_file_descriptor_proto(r).map_err(|e| format!("reference {name:?}: {e}"))?;
        }
        let name = main.name.clone().unwrap_or_default();
        pool.add_file_descriptor_proto(main).map_err(|e| format!("not a Protobuf schema: {e}"))?;
        return Ok((pool, name));
    }
    let name = format!("registry-schema-{id}.proto");
    let mut files: Vec<(String, String)> = references.to_vec();
    files.push((name.clone(), text.to_string()));
    let mut chain = ChainFileResolver::new();
    chain.add(Sources(files));
    chain.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(chain);
    compiler.include_imports(true);
    compiler.open_file(&name).map_err(|e| format!("not a Protobuf schema: {e}"))?;
    Ok((compiler.descriptor_pool(), name))
}
